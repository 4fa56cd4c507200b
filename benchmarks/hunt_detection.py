"""Detection and false-alarm rates of `commbench hunt` on this machine: 4 "nodes" (4 torchrun launches with
--nnodes 4 and one rank each, distinct COMMBENCH_NODE_NAME) run clean (--clean-runs times), and --runs times each
with one slow node (every send slower: COMMBENCH_SLOW_NODE), one slow link (COMMBENCH_SLOW_LINK), one stalling node
(COMMBENCH_STALL_NODE: some exchanges delayed) and one node whose processes run under a real CPU quota (a cgroup:
tests/cpu_quota.py; left out with the reason where /sys/fs/cgroup is not writable), alternated.

    python benchmarks/hunt_detection.py --runs 10 --clean-runs 20          # hunt at its defaults
    python benchmarks/hunt_detection.py --runs 10 -- --threshold 50        # options after -- go to commbench hunt
    python benchmarks/hunt_detection.py --runs 10 --scenarios throttled,clean  # a subset of the scenarios

With --slurm the same scenarios run as Slurm jobs (`commbench slurm submit` of a one-bench hunt suite, --nodes 4) on a
local cluster of 4 virtual nodes started here (tests/local_slurm.py: root, Debian packages), each node named by Slurm.

A run counts as right when hunt.json names exactly the injected fault (the node as a node, the link as a link, nothing
on a clean run) and the exit code agrees (0 clean, 1 with suspects)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tests/ is put on the path in main(), where --slurm needs it
    from tests.local_slurm import LocalSlurm

NODES = ("n1", "n2", "n3", "n4")
SLOW_NODE, SLOW_LINK = "n2", ("n1", "n3")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_hunt(out: Path, run_id: str, fault_env: dict, extra: list[str], throttled: str | None = None,
             quota_pct: float = 20.0) -> tuple[int, dict, float]:
    """4 torchrun launches, one per node (`throttled`'s under a CPU quota); (rank 0's exit code, hunt.json,
    seconds)."""
    with contextlib.ExitStack() as stack:
        quota = None
        if throttled:
            from tests.cpu_quota import CpuQuota

            quota = stack.enter_context(CpuQuota(quota_pct))
        return _run_hunt(out, run_id, fault_env, extra, {throttled: quota.enter} if quota else {})


def _run_hunt(out: Path, run_id: str, fault_env: dict, extra: list[str], preexec: dict) -> tuple[int, dict, float]:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith(("COMMBENCH_", "SLURM"))}
    env.update(fault_env)
    started = time.perf_counter()
    launches, logs = [], []
    for node in NODES:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "4", "--nproc-per-node", "1",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                   "-m", "commbench", "hunt", "--backend", "gloo", "--device", "cpu", "--out", str(out),
                   "--run-id", run_id, "--quiet", *extra]
        logs.append(tempfile.TemporaryFile(mode="w+"))  # not a pipe: an unread pipe that fills blocks its writer
        launches.append(subprocess.Popen(command, env={**env, "COMMBENCH_NODE_NAME": node}, stdout=logs[-1],
                                         stderr=subprocess.STDOUT, text=True, preexec_fn=preexec.get(node)))
    for launch in launches:
        launch.wait(timeout=600)
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
    seconds = time.perf_counter() - started
    hunt = out / run_id / "hunt.json"
    if not hunt.exists():
        sys.exit(f"{run_id}: no hunt.json\n" + "\n".join(outputs)[-3000:])
    codes = [launch.returncode for launch in launches]
    return max(codes), json.loads(hunt.read_text()), seconds


def run_slurm_job(cluster: LocalSlurm, out: Path, run_id: str, fault_env: dict, extra: list[str]
                  ) -> tuple[int, dict, float]:
    """One job of a hunt suite with `extra` as its keys; (the submit's exit code, hunt.json, seconds)."""
    keys = {extra[index].lstrip("-"): extra[index + 1] for index in range(0, len(extra), 2)}
    suite = out / f"{run_id}.toml"
    suite.write_text('backend = "gloo"\ndevice = "cpu"\n\n[[bench]]\nname = "hunt"\nkind = "hunt"\n'
                     + "".join(f'{key} = "{value}"\n' for key, value in keys.items()))  # as strings, as flags
    env = {key: value for key, value in os.environ.items() if not key.startswith(("COMMBENCH_", "SLURM"))}
    env["SLURM_CONF"] = cluster.env["SLURM_CONF"]
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "commbench", "slurm", "submit", str(suite), "--nodes", "4",
                                "--gpus-per-node", "0", "--nproc-per-node", "1", "--out", str(out), "--run-id", run_id,
                                "--partition", cluster.partition, "--wait", "--wait-timeout", "300", "--poll", "0.5",
                                *(arg for name, value in fault_env.items() for arg in ("--env", f"{name}={value}"))],
                               env=env, capture_output=True, text=True, timeout=400)
    seconds = time.perf_counter() - started
    hunt = out / run_id / "hunt" / "hunt.json"
    if not hunt.exists():
        sys.exit(f"{run_id}: no hunt.json\n{completed.stdout}{completed.stderr}")
    return completed.returncode, json.loads(hunt.read_text()), seconds


def named(doc: dict) -> tuple[list[str], list[tuple[str, ...]]]:
    return ([entry["node"] for entry in doc["suspect_nodes"]],
            [tuple(sorted(entry["nodes"])) for entry in doc["suspect_links"]])


Expected = tuple[list[str], list[tuple[str, ...]]]
"""The suspect nodes and links hunt.json should name."""
Scenario = tuple[dict[str, str], Expected]
"""The fault's environment, and what hunt should name."""


@dataclass
class Tally:
    """One scenario's runs: how many were right, named a node or link not injected, or missed the fault."""

    right: int = 0
    false_suspects: int = 0
    missed: int = 0
    seconds: list[float] = field(default_factory=list)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--clean-runs", type=int, default=None, help="clean runs [default: --runs]")
    parser.add_argument("--fault-pct", type=float, default=300.0)
    parser.add_argument("--stall", default="10:50", help="PERCENT:MS of the stalling node's exchanges delayed")
    parser.add_argument("--quota-pct", type=float, default=20.0, help="the throttled node's CPU quota, %% of a core")
    parser.add_argument("--keep-wrong", type=Path, help="copy the run folders of wrong runs here")
    parser.add_argument("--slurm", action="store_true", help="run each scenario as a job on a local 4-node Slurm")
    parser.add_argument("--scenarios", default=None,
                        help="a comma-separated subset of: clean, slow node, slow link, stalling, throttled "
                        "[default: all]")
    parser.add_argument("extra", nargs="*", help="options for commbench hunt (after --)")
    return parser


def _scenarios(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Scenario]:
    """The scenarios asked for (--scenarios) that can run here."""
    from tests.cpu_quota import unavailable

    scenarios: dict[str, Scenario] = {
        "clean": ({}, ([], [])),
        "slow node": ({"COMMBENCH_SLOW_NODE": f"{SLOW_NODE}:{args.fault_pct:g}"}, ([SLOW_NODE], [])),
        "slow link": ({"COMMBENCH_SLOW_LINK": f"{','.join(SLOW_LINK)}:{args.fault_pct:g}"}, ([], [SLOW_LINK])),
        "stalling": ({"COMMBENCH_STALL_NODE": f"{SLOW_NODE}:{args.stall}"}, ([SLOW_NODE], [])),
        "throttled": ({}, ([SLOW_NODE], []))}
    if args.slurm or unavailable():
        print(f"throttled node left out: {'a Slurm job step is not started here' if args.slurm else unavailable()}")
        del scenarios["throttled"]
    if args.scenarios:
        wanted = [name.strip() for name in args.scenarios.split(",")]
        unknown = [name for name in wanted if name not in scenarios]
        if unknown:
            parser.error(f"unknown or unavailable scenario(s) {unknown}; choose from {list(scenarios)}")
        scenarios = {name: scenarios[name] for name in wanted}
    return scenarios


def _one_run(args: argparse.Namespace, cluster: LocalSlurm | None, tmp: Path, name: str, index: int,
             scenario: Scenario, counts: Tally) -> None:
    """Run one scenario once, count it, and say how it went."""
    fault_env, expected = scenario
    run_id = f"{name.replace(' ', '-')}-{index}"
    throttled = SLOW_NODE if name == "throttled" else None
    code, doc, seconds = (run_slurm_job(cluster, tmp, run_id, fault_env, args.extra) if cluster
                          else run_hunt(tmp, run_id, fault_env, args.extra, throttled, args.quota_pct))
    nodes, links = named(doc)
    right = (nodes, links) == expected and code == (1 if expected != ([], []) else 0)
    found: set[object] = set(nodes) | set(links)
    wanted: set[object] = set(expected[0]) | set(expected[1])
    counts.right += right
    counts.false_suspects += bool(found - wanted)
    counts.missed += bool(wanted - found)
    counts.seconds.append(seconds)
    if not right and args.keep_wrong:
        shutil.copytree(tmp / run_id, args.keep_wrong / run_id)
    print(f"{name:9s} run {index + 1}: exit {code}, nodes {nodes}, links {links}, cleared "
          f"{len(doc['cleared'])}, detectable {doc.get('detectable_slowdown_pct')}, {seconds:.1f} s"
          f"{'' if right else '  <-- WRONG'}", flush=True)


def _print_summary(args: argparse.Namespace, tally: dict[str, Tally], runs: dict[str, int]) -> None:
    where = "Slurm jobs" if args.slurm else "torchrun launches"
    options = " ".join(args.extra) or "(defaults)"
    print(f"\n{where}, fault {args.fault_pct:g} %, stall {args.stall}, CPU quota {args.quota_pct:g} %, options "
          f"{options}")
    print(f"{'scenario':10s} {'right':>6s} {'false suspect':>14s} {'missed':>7s} {'median s':>9s}")
    for name, counts in tally.items():
        seconds = sorted(counts.seconds)
        print(f"{name:10s} {counts.right:>3d}/{runs[name]:<2d} {counts.false_suspects:>14d} "
              f"{counts.missed:>7d} {seconds[len(seconds) // 2]:>9.1f}")


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    scenarios = _scenarios(args, parser)
    clean_runs = args.clean_runs if args.clean_runs is not None else args.runs
    runs = {name: clean_runs if name == "clean" else args.runs for name in scenarios}
    tally = {name: Tally() for name in scenarios}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        cluster = None
        if args.slurm:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.local_slurm import LocalSlurm

            (Path(tmp) / "slurm").mkdir()
            cluster = stack.enter_context(LocalSlurm(nodes=4, workdir=Path(tmp) / "slurm"))
        for index in range(max(runs.values())):
            for name, scenario in scenarios.items():
                if index < runs[name]:
                    _one_run(args, cluster, Path(tmp), name, index, scenario, tally[name])
    _print_summary(args, tally, runs)


if __name__ == "__main__":
    main()
