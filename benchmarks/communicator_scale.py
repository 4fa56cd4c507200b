"""Benchmark (not a test): what `commbench p2p` and `commbench hunt` cost as the job grows, and what creating
communicators per pair cost them. For each --ranks count: p2p launched here with that many ranks (gloo, CPU,
--oversubscribe), and hunt on that many torchrun "nodes" of one rank each (tests/virtual_nodes.py); each run's wall
time, rounds, timed exchanges and meta.json's communicators_created. With --old PATH (a checkout of an earlier
commit, e.g. `git worktree add /tmp/old 9b241c2`, whose p2p made a process group per pair per round per size) the
same p2p runs there too, alternated with this checkout's, for the side-by-side ratio.

    python benchmarks/communicator_scale.py [--ranks 4,8,16] [--hunt-nodes 4,8] [--old /tmp/old]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
P2P = ("p2p", "--sizes", "8,64K", "--iters", "6", "--warmup", "1", "--backend", "gloo", "--device", "cpu",
       "--oversubscribe", "--quiet")


def p2p(ranks: int, out: Path, run_id: str, checkout: Path | None) -> tuple[float, dict]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COMMBENCH_")}
    if checkout is not None:
        env["PYTHONPATH"] = str(checkout)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "commbench", *P2P, "--nproc", str(ranks), "--out", str(out), "--run-id",
                    run_id], check=True, env=env, stdout=subprocess.DEVNULL, cwd=checkout or REPO)
    return time.perf_counter() - started, json.loads((out / run_id / "meta.json").read_text())


def hunt(nodes: int, out: Path) -> tuple[float, dict]:
    sys.path.insert(0, str(REPO))
    from tests.virtual_nodes import run_on_nodes

    out.mkdir(parents=True)
    started = time.perf_counter()
    run = run_on_nodes(out, [f"n{index + 1}" for index in range(nodes)], "hunt", "--quiet", run_id=f"hunt{nodes}",
                       timeout=1200)
    return time.perf_counter() - started, json.loads((run.run_dir / "meta.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="4,8,16")
    parser.add_argument("--hunt-nodes", default="4,8")
    parser.add_argument("--old", type=Path, help="an older checkout whose p2p runs beside this one's")
    args = parser.parse_args()
    sizes = 2
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        print("p2p, 2 sizes (8 B, 64 KiB), 1 warm-up + 6 timed transfers each way per pair")
        print(f"{'ranks':>5s} {'rounds':>6s} {'pairs':>6s} {'exchanges':>9s} {'comms':>6s} {'s':>7s}"
              + (f" {'old comms':>9s} {'old s':>7s} {'old/new':>7s}" if args.old else ""))
        for ranks in (int(value) for value in args.ranks.split(",") if value):
            rounds = ranks - 1 if ranks % 2 == 0 else ranks
            pairs = ranks * (ranks - 1) // 2
            exchanges = 2 * pairs * sizes * (1 + 6)
            seconds, meta = p2p(ranks, out, f"new{ranks}", None)
            line = (f"{ranks:>5d} {rounds:>6d} {pairs:>6d} {exchanges:>9d} {meta.get('communicators_created'):>6} "
                    f"{seconds:>7.1f}")
            if args.old:
                old_seconds, _ = p2p(ranks, out, f"old{ranks}", args.old)
                old_comms = 1 + pairs * sizes  # a group per pair per round per size, and the world
                line += f" {old_comms:>9d} {old_seconds:>7.1f} {old_seconds / seconds:>7.2f}"
            print(line, flush=True)
        if args.hunt_nodes:
            print("\nhunt at its defaults (CPU sizes), one rank per node")
            print(f"{'nodes':>5s} {'rounds':>6s} {'comms':>6s} {'s':>7s}")
            for nodes in (int(value) for value in args.hunt_nodes.split(",") if value):
                seconds, meta = hunt(nodes, out / f"hunt{nodes}")
                rounds = nodes - 1 if nodes % 2 == 0 else nodes
                print(f"{nodes:>5d} {rounds:>6d} {meta.get('communicators_created'):>6} {seconds:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
