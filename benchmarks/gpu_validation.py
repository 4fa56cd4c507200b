"""Benchmark (not a test): the whole GPU check in one script, sized for 9 minutes on one GPU.

Each step is a real `commbench` command (or the probes of benchmarks/gpu_probes.py) with a timeout and a property its
output must have; a table closes the run, and --json writes it too. What one GPU can prove is in
../shared/notes/gpu-single-h200.md: NCCL at world size 1 (every collective a device copy or a no-op), gloo on CUDA
tensors at several ranks (all_reduce and broadcast only), CUDA events, profiler traces with real kernels, NVML.

    python benchmarks/gpu_validation.py [--out DIR] [--only STEP,...] [--archive DIR]  # on a GPU node
    python benchmarks/gpu_validation.py --dry-run [--out DIR]                            # anywhere

It reruns in place: each run starts by removing what an earlier run of this script left in --out (the folder holds a
marker file it wrote), so the same command runs again on the same machine. --archive DIR writes one JSON (every
step's outcome, the probes, the vs_nccl_tests pairs) and nccl-tests' and commbench's texts into
DIR/MACHINE-DATE-COMMIT/ (tests/data/gpu/ in the repository).

--dry-run prints the plan (every step's command, timeout and property), then runs each step that can run without a
GPU as its CPU stand-in: the same command on gloo/CPU tensors with 2 ranks and smaller sizes, judged by the same
property. It proves the script, the commands and the checks; only a GPU proves the GPU paths. Exit code: 0 when every
step that ran passed, 1 otherwise.
"""

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACE = ROOT.parent / "shared" / "data" / "traces" / "gpu" / "ddp-allreduce-2rank-rank0.json.gz"
WORLD_1_COLLECTIVES = "all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all"
"""Every collective that runs at world size 1 (sendrecv needs a peer)."""
TRAINING_SHAPE = ["--layers", "2", "--hidden", "256", "--seq-len", "128", "--steps", "6", "--warmup-steps", "2"]
"""Small enough for seconds per configuration, large enough for real kernels."""
CPU_SEQ_LEN = ["--seq-len", "16"]
"""The CPU stand-in's sequence (after TRAINING_SHAPE's, so it holds): the same model, an eighth of the tokens, since
on CPU the step proves the path and its check, not kernels (seq-len 128 took 15 s of the stand-in's 33 s)."""
ONE_CONFIGURATION = {"ddp": ["--bucket-cap-mb", "25"],
                     "fsdp": ["--reshard-after-forward", "true", "--forward-prefetch", "1", "--backward-prefetch", "1"]}
"""One configuration per bench: the step proves the path, it does not sweep."""
GPU_ONLY = {"fsdp": ["--cpu-offload", "true,false"]}
"""Axis values that run on GPUs only (refused on --device cpu), added to the GPU run: FSDP with its shards offloaded
to host memory, beside the same configuration without."""
MACHINE_START_S = 90
"""What the device tool's machine took to start (an estimate: 'minutes' at most); the check's 9 minutes include it."""
BUDGET_S = 9 * 60 - MACHINE_START_S
"""The steps' expected times sum to this at most: the whole check fits in 9 minutes of GPU time with the machine's
start. Each step's timeout is 1.5 × its expected time, so a hung step costs at most half as much again."""
TIMEOUT_FACTOR = 1.5
CPU_TIMEOUT_FACTOR = 5
"""A CPU stand-in's timeout is this multiple of its step's: 2 gloo ranks on a small VM run slower than one GPU (the
stand-in of selftest took 103 s on a 2-core VM)."""


@dataclass
class Context:
    out: Path
    gpu: bool
    """False: the CPU stand-ins (gloo on CPU tensors, 2 ranks, smaller sizes)."""


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    """The property it must show, in words (the table's column)."""
    command: Callable[[Context], list[str]]
    check: Callable[[Context, subprocess.CompletedProcess], str | None]
    """None when the property holds, else what is wrong (or it raises StepFailed saying so)."""
    expected_s: float
    """What it took on one H200 (docs/measurements.md, "One GPU"), or the estimate where it has not run yet."""
    needs_gpu_only: str | None = None
    """Why the step has no CPU stand-in, where it has none."""
    after: tuple[str, ...] = field(default=())
    """Steps whose output it reads."""

    @property
    def timeout_s(self) -> int:
        return math.ceil(TIMEOUT_FACTOR * self.expected_s)


def commbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "commbench", *args]


def on_device(ctx: Context, *, gloo_on_cuda: bool = False, nproc: int = 1) -> list[str]:
    """The placement options: NCCL (or gloo on CUDA tensors) on the GPU, else gloo on CPU with 2 ranks."""
    if not ctx.gpu:
        return ["--backend", "gloo", "--device", "cpu", "--nproc", "2"]
    return ["--backend", "gloo" if gloo_on_cuda else "nccl", "--device", "cuda", "--nproc", str(nproc)]


def run_dir(ctx: Context, run_id: str) -> Path:
    return ctx.out / run_id


def results_of(ctx: Context, run_id: str) -> pd.DataFrame:
    found = sorted(run_dir(ctx, run_id).rglob("results.csv"))
    if not found:
        raise FileNotFoundError(f"no results.csv under {run_dir(ctx, run_id)}")
    return pd.concat([pd.read_csv(path) for path in found], ignore_index=True)


class StepFailed(Exception):
    """What is wrong with a step's outcome (the table's detail)."""


def exit_0(process: subprocess.CompletedProcess) -> None:
    if process.returncode != 0:
        tail = (process.stderr or process.stdout or "").strip().splitlines()[-3:]
        raise StepFailed(f"exit {process.returncode}: {' | '.join(tail)}")


def checked_rows(ctx: Context, process: subprocess.CompletedProcess, run_id: str) -> pd.DataFrame:
    """The run's rows, after it exited 0, none of them with wrong results."""
    exit_0(process)
    rows = results_of(ctx, run_id)
    if rows.empty or ("n_wrong" in rows and (rows["n_wrong"] != 0).any()):
        raise StepFailed(f"{len(rows)} rows, n_wrong {rows['n_wrong'].tolist() if 'n_wrong' in rows else '-'}")
    return rows


# ---- the steps' commands and checks


def probes_command(ctx: Context) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "gpu_probes.py"), "--out", str(ctx.out / "probes.json")]


def probes_check(ctx: Context, process) -> str | None:
    exit_0(process)
    found = json.loads((ctx.out / "probes.json").read_text())
    if not ctx.gpu:
        return None if found.get("torch") and found.get("cuda") is None else "versions or the absence of CUDA unread"
    wrong = [name for name, ok in found.get("checks", {}).items() if not ok]
    return f"probe checks failed: {', '.join(wrong)}" if wrong else None


def sweep_command(timing: str) -> Callable[[Context], list[str]]:
    def command(ctx: Context) -> list[str]:
        sizes = "1K:256M:x16" if ctx.gpu else "1K,64K"
        return commbench("sweep", *on_device(ctx), "-c", WORLD_1_COLLECTIVES, "--sizes", sizes, "--iters", "6",
                         "--timing", timing, "--out", str(ctx.out), "--run-id", f"sweep-{timing}", "--quiet")
    return command


def sweep_check(timing: str) -> Callable[[Context, subprocess.CompletedProcess], str | None]:
    def check(ctx: Context, process) -> str | None:
        rows = checked_rows(ctx, process, f"sweep-{timing}")
        sizes = 5 if ctx.gpu else 2  # 1K:256M:x16 is 1K, 16K, 256K, 4M, 64M
        collectives = len(WORLD_1_COLLECTIVES.split(","))
        if len(rows) < sizes * collectives:
            return f"{len(rows)} rows, expected at least {sizes * collectives}"
        if not (rows["time_us_p50"] > 0).all():
            return "a row without a positive time"
        return None
    return check


def profile_command(ctx: Context) -> list[str]:
    return commbench("sweep", *on_device(ctx, gloo_on_cuda=True, nproc=4), "-c", "all_reduce", "--sizes", "1K,1M",
                     "--iters", "6", "--profile", "--out", str(ctx.out), "--run-id", "gloo-cuda-profile", "--quiet")


def profile_check(ctx: Context, process) -> str | None:
    checked_rows(ctx, process, "gloo-cuda-profile")
    traces = list((run_dir(ctx, "gloo-cuda-profile") / "traces").rglob("*.json*"))
    return None if traces else "no trace written under traces/"


def analyze_command(ctx: Context) -> list[str]:
    traces = sorted(str(path) for path in (run_dir(ctx, "gloo-cuda-profile") / "traces").rglob("*.json*"))
    return commbench("trace", "analyze", *traces[:1], "--json")


def analyze_check(ctx: Context, process) -> str | None:
    exit_0(process)
    document = json.loads(process.stdout)
    text = json.dumps(document)
    # the communication the analyser found: the gloo all_reduces of the trace, on CPU spans or CUDA copies
    comm = [value for key, value in _walk(document) if key.startswith("comm") and key.endswith("_us")]
    if not comm or max(comm) <= 0:
        return f"no communication time in the analysis ({text[:200]})"
    return None


def _walk(node, key: str = ""):
    if isinstance(node, dict):
        for name, value in node.items():
            yield from _walk(value, name)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value, key)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield key, float(node)


def training_command(bench: str, *, gloo_on_cuda: bool = False) -> Callable[[Context], list[str]]:
    def command(ctx: Context) -> list[str]:
        nproc = 2 if gloo_on_cuda else 1
        extra = ONE_CONFIGURATION[bench] + (GPU_ONLY.get(bench, []) if ctx.gpu and not gloo_on_cuda else [])
        run_id = f"{bench}-{'gloo-cuda' if gloo_on_cuda else 'world1'}"
        shape = TRAINING_SHAPE + ([] if ctx.gpu else CPU_SEQ_LEN)
        return commbench(bench, *on_device(ctx, gloo_on_cuda=gloo_on_cuda, nproc=nproc), *shape, *extra,
                         "--out", str(ctx.out), "--run-id", run_id, "--quiet")
    return command


def training_check(run_id: str) -> Callable[[Context, subprocess.CompletedProcess], str | None]:
    def check(ctx: Context, process) -> str | None:
        rows = checked_rows(ctx, process, run_id)
        if "step_time_ms_p50" not in rows or not (rows["step_time_ms_p50"] > 0).all():
            return f"no positive step_time_ms_p50 in {len(rows)} rows"
        if "peak_mem_bytes" in rows and not (rows["peak_mem_bytes"] > 0).all():
            return "a configuration without peak memory"
        if ctx.gpu and "model_state_host_bytes" in rows and rows["model_state_host_bytes"].notna().any():
            host, predicted = rows["model_state_host_bytes"], rows["model_state_host_bytes_predicted"]
            if not (host == predicted).all():  # CPU offload: all of the state in host memory, else none
                return f"model state in host memory {host.tolist()} != predicted {predicted.tolist()}"
        return None
    return check


def vs_nccl_tests_command(ctx: Context) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "vs_nccl_tests.py"), "--out", str(ctx.out / "vs-nccl-tests"),
            "--json", str(ctx.out / "vs-nccl-tests.json"), *([] if ctx.gpu else ["--dry-run"])]


def vs_nccl_tests_check(ctx: Context, process) -> str | None:
    exit_0(process)
    found = json.loads((ctx.out / "vs-nccl-tests.json").read_text())
    pairs = found["pairs"]
    if not pairs:
        return "no pair of nccl-tests and commbench times compared"
    outside = [pair for pair in pairs if pair["verdict"].startswith("OUTSIDE")]
    return f"{len(outside)} of {len(pairs)} pairs outside the goal" if outside and ctx.gpu else None


def selftest_command(ctx: Context) -> list[str]:
    # the CPU stand-in runs selftest's sweep path only: the step's command and check are what a dry run proves, and
    # tests/test_selftest.py runs every path on CPU already (the full stand-in took 46 s of CI's 12 minutes)
    placement = [] if ctx.gpu else ["--backend", "gloo", "--device", "cpu", "--nproc", "2", "--only", "sweep"]
    return commbench("selftest", *placement, "--out", str(ctx.out), "--run-id", "selftest")


def replay_command(ctx: Context) -> list[str]:
    # a 2-rank NCCL DDP step: its all_reduces run on gloo with CUDA tensors at 2 ranks on one GPU
    return commbench("replay", str(SHARED_TRACE), *on_device(ctx, gloo_on_cuda=True, nproc=2), "--scale-world", "2",
                     "--iters", "6", "--out", str(ctx.out), "--run-id", "replay", "--quiet")


def replay_check(ctx: Context, process) -> str | None:
    if not SHARED_TRACE.exists():
        return f"{SHARED_TRACE} is absent (a clone without ../shared)"
    checked_rows(ctx, process, "replay")
    return None


STEPS = (
    Step("probes", "versions, NVML by UUID, field values, event resolution, spin calibration, host issue times, the "
         "launch queue's depth", probes_command, probes_check, 10),
    Step("vs-nccl-tests", "nccl-tests built against torch's NCCL beside commbench perf and sweep, every collective 8 B "
         "to 1 GiB: commbench ≤ nccl-tests + 1 µs, within 3 % above 10 µs", vs_nccl_tests_command,
         vs_nccl_tests_check, 180),
    Step("sweep-per-iteration", "world-1 sweep of 6 collectives, per-iteration timing (CUDA events and the agreed "
         "spin): every row checked (n_wrong 0), times > 0", sweep_command("per-iteration"),
         sweep_check("per-iteration"), 17),
    Step("gloo-cuda-profile", "gloo on CUDA tensors, 4 ranks on one GPU, with --profile: runs, checked",
         profile_command, profile_check, 20),
    Step("trace-analyze", "trace analyze of that trace finds communication > 0", analyze_command, analyze_check, 3,
         after=("gloo-cuda-profile",)),
    Step("fsdp-world1", "FSDP at world 1: step time, peak memory, CPU offload's state in host memory as predicted",
         training_command("fsdp"), training_check("fsdp-world1"), 25),
    Step("ddp-gloo-cuda", "DDP with gloo on CUDA tensors at 2 ranks", training_command("ddp", gloo_on_cuda=True),
         training_check("ddp-gloo-cuda"), 26),
    Step("selftest", "commbench selftest passes every step it runs (DDP, ZeRO-1/2/3 and FSDP at world 1 among them)",
         selftest_command, lambda ctx, process: exit_0(process), 150),
    Step("replay", "replay of the shared 2-rank GPU DDP trace, every call checked", replay_command, replay_check, 15),
)
"""The batch-timed sweep and the DDP and ZeRO steps of earlier checks are in vs-nccl-tests (perf and the sweep, batch
timing, every row checked) and selftest (DDP, ZeRO and FSDP at world 1): run beside them they pushed the check over
its 9 minutes."""


@dataclass
class Outcome:
    step: str
    mode: str
    seconds: float | None
    verdict: str
    detail: str


def run_step(step: Step, ctx: Context) -> Outcome:
    mode = "GPU" if ctx.gpu else "CPU stand-in"
    if not ctx.gpu and step.needs_gpu_only:
        return Outcome(step.name, "skipped", None, "-", step.needs_gpu_only)
    command = step.command(ctx)
    timeout = step.timeout_s * (1 if ctx.gpu else CPU_TIMEOUT_FACTOR)
    started = time.monotonic()
    try:
        process = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return Outcome(step.name, mode, time.monotonic() - started, "FAIL", f"over its {timeout} s timeout")
    seconds = time.monotonic() - started
    try:
        problem = step.check(ctx, process)
    except StepFailed as failure:
        problem = str(failure)
    except (OSError, ValueError, KeyError) as error:  # a missing or unreadable output is the step's failure
        problem = f"{type(error).__name__}: {error}"
    return Outcome(step.name, mode, seconds, "FAIL" if problem else "PASS", problem or "")


def print_plan(steps: list[Step], ctx: Context) -> None:
    print(f"# plan ({'GPU' if ctx.gpu else 'CPU stand-ins'}): expected {sum(s.expected_s for s in steps):.0f} s on one "
          f"GPU (budget {BUDGET_S} s: 9 minutes less the machine's start), each step's timeout "
          f"{TIMEOUT_FACTOR:g} × its expected time")
    for step in steps:
        shown = " ".join(step.command(ctx)) if not step.after else f"(after {', '.join(step.after)}) " + " ".join(
            step.command(ctx)[:5]) + " ..."
        print(f"- {step.name} [{step.timeout_s} s]: {step.what}\n    {shown}")


def print_table(outcomes: list[Outcome]) -> None:
    print("\n| step | mode | seconds | result | detail |\n| --- | --- | --- | --- | --- |")
    for outcome in outcomes:
        seconds = "-" if outcome.seconds is None else f"{outcome.seconds:.1f}"
        print(f"| {outcome.step} | {outcome.mode} | {seconds} | {outcome.verdict} | {outcome.detail} |")


def gpu_present() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


MARKER = ".gpu_validation"
"""Written into --out by a run: a later run removes such a folder's contents before it starts, and nothing else."""


def fresh_out(out: Path) -> None:
    """An empty --out for this run: an earlier run's folders (their run ids) would refuse every step."""
    if out.exists() and (out / MARKER).exists():
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} holds files this script did not write; pass an empty or new --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by benchmarks/gpu_validation.py; removed by its next run\n")


def commit_of(given: str | None) -> str:
    """The commit the check ran on (short hash, '+dirty' with uncommitted changes): --commit where the checkout has
    no .git (a device machine receives the working tree without it)."""
    if given:
        return given
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def archive(folder: Path, ctx: Context, outcomes: list, commit: str) -> Path:
    """One JSON (every step's outcome, the probes, the vs_nccl_tests pairs) and the texts nccl-tests and commbench
    printed, in folder/MACHINE-DATE-COMMIT/."""
    probes = _json_or_none(ctx.out / "probes.json")
    devices = ((probes or {}).get("cuda") or {}).get("devices") or []
    machine = devices[0]["torch_name"].split()[-1].lower() if devices and ctx.gpu else "cpu-stand-in"
    day = time.strftime("%Y-%m-%d", time.gmtime())
    target = folder / f"{machine}-{day}-{commit.replace('+', '-')}"
    target.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine, "date": day, "commit": commit, "gpu": ctx.gpu,
                "outcomes": [outcome.__dict__ for outcome in outcomes], "probes": probes,
                "vs_nccl_tests": _json_or_none(ctx.out / "vs-nccl-tests.json")}
    (target / "gpu_validation.json").write_text(json.dumps(document, indent=2) + "\n")
    for text in sorted((ctx.out / "vs-nccl-tests").rglob("*.txt")):
        shutil.copy(text, target / text.name)
    return target


def _json_or_none(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/commbench-gpu-validation"))
    parser.add_argument("--dry-run", action="store_true", help="the plan, then every step's CPU stand-in")
    parser.add_argument("--only", default="", help="comma-separated step names [default: all]")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("--archive", type=Path, help="write the JSON and the texts into ARCHIVE/MACHINE-DATE-COMMIT/")
    parser.add_argument("--commit", help="the commit to name in the archive [default: git's HEAD]")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - {step.name for step in STEPS})
    if unknown:
        parser.error(f"unknown step(s) {unknown}; choose from {[step.name for step in STEPS]}")
    steps = [step for step in STEPS if not names or step.name in names]
    gpu = gpu_present()
    if not gpu and not args.dry_run:
        print("no CUDA GPU is visible: run with --dry-run for the plan and the CPU stand-ins", file=sys.stderr)
        return 2
    fresh_out(args.out)
    ctx = Context(out=args.out, gpu=gpu and not args.dry_run)
    print_plan(steps, ctx)
    outcomes = []
    for step in steps:
        outcome = run_step(step, ctx)
        outcomes.append(outcome)
        print(f"{outcome.step}: {outcome.verdict} ({outcome.mode}) {outcome.detail}", flush=True)
    print_table(outcomes)
    if args.json:
        args.json.write_text(json.dumps([outcome.__dict__ for outcome in outcomes], indent=2))
    if args.archive:
        print(f"archived in {archive(args.archive, ctx, outcomes, commit_of(args.commit))}")
    return 0 if all(outcome.verdict != "FAIL" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
