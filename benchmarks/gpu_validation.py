"""Benchmark (not a test): the whole GPU check of a node in one script, at world 1 and at world N (the node's N GPUs),
sized for 9 minutes of device time on one GPU and 10 minutes on 8, the machine's start included.

Each step is a real `commbench` command (or benchmarks/gpu_probes.py, node_facts.py, vs_nccl_tests.py) run in a
process group of its own (benchmarks/process_group.py) with a timeout and a property its output must have: a step past
its timeout is stopped with every process it started (torchrun, each rank) and is a failed row of the table that
closes the run; the check goes on with the next step. Where a step runs on one GPU or on several, and at which world,
is in STEPS; what one GPU can prove is in ../shared/notes/gpu-single-h200.md (NCCL at world 1, where every collective
is a device copy or nothing; gloo on CUDA tensors at several ranks, all_reduce and broadcast only).

    python benchmarks/gpu_validation.py [--out DIR] [--only STEP,...] [--archive DIR]  # on a GPU node
    python benchmarks/gpu_validation.py --plan [--gpus N]                              # the plan and its estimate
    python benchmarks/gpu_validation.py --dry-run [--gpus N] [--out DIR]               # anywhere

The plan names every step with its world, expected time and timeout, the step-by-step estimate of device time with
the machine's start, the worst case (every step at its timeout), and whether nccl-tests' binaries are in
.vendor/nccl-tests-bin (built on a CPU machine by `vs_nccl_tests.py --build-only`, carried with the checkout): the
exact command to build them where they are missing.

It reruns in place: each run starts by removing what an earlier run of this script left in --out (the folder holds a
marker file it wrote). --archive DIR writes the node's archive into DIR/MACHINE-DATE-COMMIT/ (tests/data/gpu/ in the
repository): gpu_validation.json (every step's outcome, the estimate, the probes, the vs_nccl_tests pairs), README.md,
node_facts.py's nvidia-smi.txt, nvml.json and nccl-topo.xml, the nccl-tests and commbench texts, and each step's
output in steps/; and the same folder as one file, OUT/MACHINE-DATE-COMMIT.tar.gz, to attach to a report.

--dry-run prints the plan, then runs each step that can run without a GPU as its CPU stand-in: the same command on
gloo/CPU tensors with 2 ranks and smaller sizes, judged by the same property. It proves the script, the commands and
the checks; only a GPU proves the GPU paths. Exit code: 0 when every step that ran passed, 1 otherwise, 2 no GPU
without --dry-run or --plan.
"""

import argparse
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))  # process_group beside it, also when imported from tests
from process_group import TERM_GRACE_S, StepResult, run_step

ROOT = Path(__file__).resolve().parent.parent
SHARED_TRACE = ROOT.parent / "shared" / "data" / "traces" / "gpu" / "ddp-allreduce-2rank-rank0.json.gz"
WORLD_1_COLLECTIVES = "all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all"
"""Every collective that runs at world size 1 (sendrecv needs a peer)."""
SWEEP_SIZES = "1K:256M:x16"
"""1K, 16K, 256K, 4M, 64M: latency- to bandwidth-bound on one GPU."""
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
SELFTEST_STEPS = "sweep,profile,ddp,zero,report,compare"
"""selftest's steps but fsdp: the fsdp step runs FSDP at the same world, with CPU offload on and off (selftest's fsdp
took 18 s of its 104 s on H200-1)."""
COMPARED_AT_WORLD_1 = ("all_gather", "all_to_all")
"""vs-nccl-tests on one GPU: at world 1 NCCL copies the input (ncclLaunchOneRank) for an out-of-place collective and
does nothing in place (all_reduce, broadcast and reduce have only the in-place form in torch), so the pairs worth
comparing are copies; reduce_scatter's is the same copy through the same torch path as all_gather's."""
COMPARED_AT_WORLD_N = ("all_reduce", "all_to_all", "sendrecv")
"""vs-nccl-tests on several GPUs: the three torch call paths that differ most (the in-place all_reduce everyone
compares, all_to_all_single, sendrecv through batch_isend_irecv and its stream hops). all_gather and reduce_scatter
run at world N in selftest's sweep; `vs_nccl_tests.py --ngpus N` alone compares all seven (2.5-3.5 min more on 8
GPUs: a perf launch, two nccl-tests runs and 28 sweep points per collective)."""

MACHINE_START_S = 150
"""The device machine's start, counted in the check's device time. None has been measured (docs/measurements.md and
tests/data/gpu hold no start time; the device tool says 'a few minutes'): 150 s until one is."""
ONE_GPU_BUDGET_S = 9 * 60
"""The whole check on one GPU, with the machine's start: the lent machine gives 15 minutes of device time per session,
which the worst case (every step at its timeout) fits too."""
SEVERAL_GPUS_BUDGET_S = 10 * 60
"""The whole check on a node of up to 8 GPUs (world 1 and world N), with the machine's start."""
ESTIMATED_FOR_GPUS = 8
"""The several-GPU times are estimates for 8 GPUs (nothing has run on several GPUs yet); more GPUs take longer."""
TIMEOUT_FACTOR = 1.5
"""Each step's timeout is this multiple of its expected time, so a hung step costs at most half as much again."""
CPU_TIMEOUT_FACTOR = 5
"""A CPU stand-in's timeout is this multiple of its step's: 2 gloo ranks on a small VM run slower than one GPU (the
stand-in of selftest took 103 s on a 2-core VM)."""
DEFAULT_ARCH = "90"
"""The compute capability the printed build command names where no GPU is visible (H100, H200)."""


@dataclass
class Context:
    out: Path
    gpu: bool
    """False: the CPU stand-ins (gloo on CPU tensors, 2 ranks, smaller sizes)."""
    gpus: int = 1
    """N, the node's GPUs: the world of the steps that run on every GPU."""


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    """The property it must show, in words (the plan's line)."""
    command: Callable[[Context], list[str]]
    check: Callable[[Context, StepResult], str | None]
    """None when the property holds, else what is wrong (or it raises StepFailed saying so)."""
    world: Callable[[int], str]
    """Its ranks on a node of N GPUs, in words: "1", "8", "4 on 1 GPU", "-" where it starts none."""
    one_gpu_s: float | None
    """Expected seconds on a node of one GPU (H200-1's, docs/measurements.md "One GPU", where it ran there, else an
    estimate); None: the step does not run on one GPU."""
    several_gpus_s: float | None
    """Expected seconds on a node of 8 GPUs (an estimate); None: the step does not run on several GPUs."""
    instead: str = ""
    """Where it runs on one kind of node only: what proves its property on the other."""
    after: tuple[str, ...] = field(default=())
    """Steps whose output it reads."""

    def expected_s(self, gpus: int) -> float | None:
        return self.one_gpu_s if gpus == 1 else self.several_gpus_s

    def timeout_s(self, gpus: int) -> int:
        expected = self.expected_s(gpus)
        if expected is None:
            raise ValueError(f"{self.name} does not run on a node of {gpus} GPU(s)")
        return math.ceil(TIMEOUT_FACTOR * expected)


def no_ranks(gpus: int) -> str:
    return "-"


def one_rank(gpus: int) -> str:
    return "1"


def every_gpu(gpus: int) -> str:
    return str(gpus)


def on_the_one_gpu(ranks: int) -> Callable[[int], str]:
    return lambda gpus: f"{ranks} on 1 GPU"


def replay_world(gpus: int) -> str:
    return "2 on 1 GPU" if gpus == 1 else str(gpus)


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


def exit_0(process: StepResult) -> None:
    if process.returncode != 0:
        tail = (process.stderr or process.stdout or "").strip().splitlines()[-3:]
        raise StepFailed(f"exit {process.returncode}: {' | '.join(tail)}")


def checked_rows(ctx: Context, process: StepResult, run_id: str) -> pd.DataFrame:
    """The run's rows, after it exited 0, none of them with wrong results."""
    exit_0(process)
    rows = results_of(ctx, run_id)
    if rows.empty or ("n_wrong" in rows and (rows["n_wrong"] != 0).any()):
        raise StepFailed(f"{len(rows)} rows, n_wrong {rows['n_wrong'].tolist() if 'n_wrong' in rows else '-'}")
    return rows


# ---- the steps' commands and checks


def probes_command(ctx: Context) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "gpu_probes.py"), "--out", str(ctx.out / "probes.json")]


def probes_check(ctx: Context, process: StepResult) -> str | None:
    exit_0(process)
    found = json.loads((ctx.out / "probes.json").read_text())
    if not ctx.gpu:
        return None if found.get("torch") and found.get("cuda") is None else "versions or the absence of CUDA unread"
    wrong = [name for name, ok in found.get("checks", {}).items() if not ok]
    return f"probe checks failed: {', '.join(wrong)}" if wrong else None


FACT_FILES = ("nvidia-smi.txt", "nvml.json", "nccl-topo.xml")
"""node_facts.py's files, named as in tests/data/gpu/h200-1/ (tests/test_expect.py reads them there)."""


def node_facts_command(ctx: Context) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "node_facts.py"), "--out", str(ctx.out / "node-facts"),
            "--gpus", str(ctx.gpus)]


def node_facts_check(ctx: Context, process: StepResult) -> str | None:
    exit_0(process)
    said = json.loads((ctx.out / "node-facts" / "facts.json").read_text())["files"]
    if set(said) != set(FACT_FILES):
        return f"facts.json names {sorted(said)}, not {list(FACT_FILES)}"
    if not ctx.gpu:  # the stand-in proves the script says what it could not read; a GPU node must have all three
        return None
    absent = [f"{name} {state}" for name, state in said.items() if state != "written"]
    return "; ".join(absent) if absent else facts_disagree(ctx.out / "node-facts", ctx.gpus)


def facts_disagree(folder: Path, gpus: int) -> str | None:
    """Whether the files describe the node of `gpus` GPUs, read as the tests read tests/data/gpu/ (read_facts)."""
    from commbench.expect import read_facts

    in_nvml = json.loads((folder / "nvml.json").read_text())["count"]
    in_topology = read_facts(folder / "nccl-topo.xml").gpus_per_node
    if in_nvml < gpus or in_topology != gpus:
        return f"NVML sees {in_nvml} GPUs, NCCL's topology {in_topology}, the world is {gpus}"
    return None if "NVSMI LOG" in (folder / "nvidia-smi.txt").read_text() else "no `nvidia-smi -q` in nvidia-smi.txt"


def sweep_command(ctx: Context) -> list[str]:
    sizes = SWEEP_SIZES if ctx.gpu else "1K,64K"
    return commbench("sweep", *on_device(ctx), "-c", WORLD_1_COLLECTIVES, "--sizes", sizes, "--iters", "6",
                     "--timing", "per-iteration", "--out", str(ctx.out), "--run-id", "sweep-per-iteration", "--quiet")


def sweep_check(ctx: Context, process: StepResult) -> str | None:
    rows = checked_rows(ctx, process, "sweep-per-iteration")
    sizes = 5 if ctx.gpu else 2  # SWEEP_SIZES is 1K, 16K, 256K, 4M, 64M
    collectives = len(WORLD_1_COLLECTIVES.split(","))
    if len(rows) < sizes * collectives:
        return f"{len(rows)} rows, expected at least {sizes * collectives}"
    if not (rows["time_us_p50"] > 0).all():
        return "a row without a positive time"
    return None


LAUNCH_NOISE_RUN = "launch-noise"
LAUNCH_NOISE_LAUNCHES = "3"
"""gate/machine_noise.MIN_LAUNCHES: the fewest launches a run set measures launch noise from."""


def launch_noise_command(ctx: Context) -> list[str]:
    """A run set of 3 launches of a small sweep on every GPU, default timing: the launch-to-launch spread a gate on
    this machine must allow, per (backend, device type, world size) (gate/priors.MEASURED keeps what GPU checks
    measured)."""
    sizes = "1K,1M,64M" if ctx.gpu else "1K,64K"
    return commbench("sweep", *on_device(ctx, nproc=ctx.gpus), "-c", "all_reduce", "--sizes", sizes,
                     "--launches", LAUNCH_NOISE_LAUNCHES, "--out", str(ctx.out), "--run-id", LAUNCH_NOISE_RUN,
                     "--quiet")


def launch_noise_check(ctx: Context, process: StepResult) -> str | None:
    """Every launch's rows checked, and the run set's launch noise a percentage (its run_set.json)."""
    checked_rows(ctx, process, LAUNCH_NOISE_RUN)
    found = json.loads((run_dir(ctx, LAUNCH_NOISE_RUN) / "run_set.json").read_text())
    noise = found.get("launch_noise_pct")
    if not isinstance(noise, (int, float)) or not math.isfinite(noise):
        return f"run_set.json's launch_noise_pct is {noise!r}, not a percentage"
    return None


def nccl_tests():
    """benchmarks/nccl_tests_build.py, vs_nccl_tests.py's build half: the binaries' folder, their names and which are
    missing, imported only where the plan holds the vs-nccl-tests step."""
    import nccl_tests_build

    return nccl_tests_build


def compared_collectives(gpus: int) -> tuple[str, ...]:
    return COMPARED_AT_WORLD_1 if gpus == 1 else COMPARED_AT_WORLD_N


def vs_nccl_tests_command(ctx: Context) -> list[str]:
    return [sys.executable, str(ROOT / "benchmarks" / "vs_nccl_tests.py"), "--out", str(ctx.out / "vs-nccl-tests"),
            "--json", str(ctx.out / "vs-nccl-tests.json"), "--binaries", str(nccl_tests().DEFAULT_BINARIES),
            "--collectives", ",".join(compared_collectives(ctx.gpus)), "--ngpus", str(ctx.gpus),
            *([] if ctx.gpu else ["--dry-run"])]


def vs_nccl_tests_check(ctx: Context, process: StepResult) -> str | None:
    exit_0(process)
    found = json.loads((ctx.out / "vs-nccl-tests.json").read_text())
    pairs = found["pairs"]
    if not pairs:
        return "no pair of nccl-tests and commbench times compared"
    outside = [pair for pair in pairs if pair["verdict"].startswith("OUTSIDE")]
    return f"{len(outside)} of {len(pairs)} pairs outside the goal" if outside and ctx.gpu else None


def profile_command(ctx: Context) -> list[str]:
    return commbench("sweep", *on_device(ctx, gloo_on_cuda=True, nproc=4), "-c", "all_reduce", "--sizes", "1K,1M",
                     "--iters", "6", "--profile", "--out", str(ctx.out), "--run-id", "gloo-cuda-profile", "--quiet")


def profile_check(ctx: Context, process: StepResult) -> str | None:
    checked_rows(ctx, process, "gloo-cuda-profile")
    traces = list((run_dir(ctx, "gloo-cuda-profile") / "traces").rglob("*.json*"))
    return None if traces else "no trace written under traces/"


def analyze_command(ctx: Context) -> list[str]:
    traces = sorted(str(path) for path in (run_dir(ctx, "gloo-cuda-profile") / "traces").rglob("*.json*"))
    return commbench("trace", "analyze", *traces[:1], "--json")


def analyze_check(ctx: Context, process: StepResult) -> str | None:
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


def training_command(bench: str, run_id: str, *, gloo_on_cuda: bool = False) -> Callable[[Context], list[str]]:
    """NCCL on every GPU of the node, or gloo on CUDA tensors with 2 ranks on the one GPU."""
    def command(ctx: Context) -> list[str]:
        placement = on_device(ctx, gloo_on_cuda=True, nproc=2) if gloo_on_cuda else on_device(ctx, nproc=ctx.gpus)
        extra = ONE_CONFIGURATION[bench] + (GPU_ONLY.get(bench, []) if ctx.gpu and not gloo_on_cuda else [])
        shape = TRAINING_SHAPE + ([] if ctx.gpu else CPU_SEQ_LEN)
        return commbench(bench, *placement, *shape, *extra, "--out", str(ctx.out), "--run-id", run_id, "--quiet")
    return command


def training_check(run_id: str) -> Callable[[Context, StepResult], str | None]:
    def check(ctx: Context, process: StepResult) -> str | None:
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


def selftest_command(ctx: Context) -> list[str]:
    # the CPU stand-in runs selftest's sweep path only: the step's command and check are what a dry run proves, and
    # tests/test_selftest.py runs every path on CPU already (the full stand-in took 46 s of CI's 12 minutes)
    placement = ["--nproc", str(ctx.gpus), "--only", SELFTEST_STEPS] if ctx.gpu else \
        ["--backend", "gloo", "--device", "cpu", "--nproc", "2", "--only", "sweep"]
    return commbench("selftest", *placement, "--out", str(ctx.out), "--run-id", "selftest")


def replay_command(ctx: Context) -> list[str]:
    # a 2-rank NCCL DDP step: on one GPU its all_reduces run on gloo with CUDA tensors at 2 ranks, on several GPUs on
    # NCCL scaled to every GPU
    if ctx.gpu and ctx.gpus > 1:
        placement, world = on_device(ctx, nproc=ctx.gpus), ctx.gpus
    else:
        placement, world = on_device(ctx, gloo_on_cuda=True, nproc=2), 2
    return commbench("replay", str(SHARED_TRACE), *placement, "--scale-world", str(world), "--iters", "6",
                     "--out", str(ctx.out), "--run-id", "replay", "--quiet")


def replay_check(ctx: Context, process: StepResult) -> str | None:
    if not SHARED_TRACE.exists():
        return f"{SHARED_TRACE} is absent (a clone without ../shared)"
    checked_rows(ctx, process, "replay")
    return None


SELFTEST_PROFILES_ON_SEVERAL = "on several GPUs selftest's profile step traces NCCL's kernels between the GPUs and " \
                               "analyses the trace"
STEPS = (
    Step("probes", "versions, NVML by UUID, field values, event resolution, spin calibration, host issue times, the "
         "launch queue's depth", probes_command, probes_check, no_ranks, 10, 12),
    Step("node-facts", "nvidia-smi's texts, NVML's answers and NCCL's topology for the archive: all written, NVML and "
         "NCCL's topology see the N GPUs", node_facts_command, node_facts_check, no_ranks, 8, 15),
    Step("sweep-per-iteration", "world-1 sweep of 6 collectives, per-iteration timing (CUDA events and the agreed "
         "spin): every row checked (n_wrong 0), times > 0", sweep_command, sweep_check, one_rank, 17, 17),
    Step("launch-noise", "a run set of 3 launches of a small all_reduce sweep on every GPU: every row checked, its "
         "launch noise measured (run_set.json, kept in the archive for gate/priors.MEASURED under backend, device type "
         "and world size)", launch_noise_command, launch_noise_check, every_gpu, 25, 40),
    Step("vs-nccl-tests", "the prebuilt nccl-tests (one thread per GPU) beside commbench perf and sweep, 8 B to 1 GiB: "
         "every pair within vs_nccl_tests' goal", vs_nccl_tests_command, vs_nccl_tests_check, every_gpu, 80, 145),
    Step("gloo-cuda-profile", "gloo on CUDA tensors, 4 ranks on one GPU, with --profile: runs, checked",
         profile_command, profile_check, on_the_one_gpu(4), 20, None, instead=SELFTEST_PROFILES_ON_SEVERAL),
    Step("trace-analyze", "trace analyze of that trace finds communication > 0", analyze_command, analyze_check,
         no_ranks, 3, None, instead=SELFTEST_PROFILES_ON_SEVERAL, after=("gloo-cuda-profile",)),
    Step("fsdp", "FSDP on every GPU: step time, peak memory, CPU offload's state in host memory as predicted",
         training_command("fsdp", "fsdp"), training_check("fsdp"), every_gpu, 25, 32),
    Step("ddp-gloo-cuda", "DDP with gloo on CUDA tensors at 2 ranks", training_command("ddp", "ddp-gloo-cuda",
         gloo_on_cuda=True), training_check("ddp-gloo-cuda"), on_the_one_gpu(2), 26, None,
         instead="on several GPUs selftest's ddp step runs DDP on NCCL between the GPUs"),
    Step("selftest", f"commbench selftest on every GPU passes every step it runs ({SELFTEST_STEPS}: DDP and "
         "ZeRO-1/2/3 among them)", selftest_command, lambda ctx, process: exit_0(process), every_gpu, 130, 155),
    Step("replay", "replay of the shared 2-rank GPU DDP trace (on several GPUs scaled to every GPU), every call "
         "checked", replay_command, replay_check, replay_world, 15, 20),
)
"""Where the expected times come from. One GPU: H200-1's (docs/measurements.md "The whole GPU check on one H200"):
probes 6.8 and 5.3 s, sweep-per-iteration 17.0, gloo-cuda-profile 19.8, trace-analyze 2.6, fsdp 24.4, ddp-gloo-cuda
25.3, replay 8.8-14.9, selftest 104 to over 150 with its fsdp step (18 s of the 104), which the fsdp step covers.
Estimates: node-facts (five nvidia-smi calls, torch's import, one NCCL communicator); vs-nccl-tests without its build
(prebuilt binaries): two perf launches of 10-18 s, four nccl-tests runs (plain and -C 1) of ~5 s, the sweep of two
collectives at 14 sizes ~30 s. Eight GPUs, all estimates: each launch of 8 ranks 5-8 s longer than of one (8
interpreters on 16 cores, NCCL's init over 8 GPUs); vs-nccl-tests' three collectives 3 perf launches of 15-22 s,
6 nccl-tests runs of 5-8 s, a sweep of 70 points ~50 s; selftest's 4 launches and a sweep with sendrecv and the ring
at 8 ranks. Batch timing is vs-nccl-tests' (perf and its sweep, every row checked), DDP and ZeRO are selftest's: a step
of their own beside them would take the check past its budget."""


# ---- the plan and its estimate of device time


def planned(gpus: int, names: list[str]) -> list[Step]:
    """The steps that run on a node of `gpus` GPUs (of `names`, where given), in run order."""
    return [step for step in STEPS if step.expected_s(gpus) is not None and (not names or step.name in names)]


def not_planned(gpus: int, names: list[str]) -> list[Step]:
    return [step for step in STEPS if step.expected_s(gpus) is None and (not names or step.name in names)]


@dataclass(frozen=True)
class Estimate:
    """The device time of the planned steps on a node of `gpus` GPUs, with the machine's start."""

    gpus: int
    steps: tuple[Step, ...]

    @property
    def budget_s(self) -> int:
        return ONE_GPU_BUDGET_S if self.gpus == 1 else SEVERAL_GPUS_BUDGET_S

    @property
    def expected_s(self) -> float:
        return MACHINE_START_S + sum(step.expected_s(self.gpus) or 0 for step in self.steps)

    @property
    def timeouts_s(self) -> float:
        """Every step at its timeout."""
        return MACHINE_START_S + sum(step.timeout_s(self.gpus) for step in self.steps)

    @property
    def worst_s(self) -> float:
        """Every step at its timeout, each process group stopped within TERM_GRACE_S more."""
        return self.timeouts_s + TERM_GRACE_S * len(self.steps)


def estimate_lines(estimate: Estimate) -> list[str]:
    """The step-by-step table of device time and its totals."""
    gpus = estimate.gpus
    source = "H200-1's times where measured" if gpus == 1 else \
        f"estimates for {ESTIMATED_FOR_GPUS} GPUs (nothing has run on several GPUs yet)"
    lines = [f"# device time on a node of {gpus} GPU(s): {source}", "",
             "| step | world | expected (s) | timeout (s) |", "| --- | --- | ---: | ---: |",
             f"| machine start | - | {MACHINE_START_S} | {MACHINE_START_S} |"]
    lines += [f"| {step.name} | {step.world(gpus)} | {step.expected_s(gpus):g} | {step.timeout_s(gpus)} |"
              for step in estimate.steps]
    lines += [f"| total | | {estimate.expected_s:g} | {estimate.timeouts_s:g} |", "",
              f"# expected {estimate.expected_s:g} s ({estimate.expected_s / 60:.1f} min) of the {estimate.budget_s} s "
              f"budget, the machine's start included; worst case {estimate.worst_s:g} s ({estimate.worst_s / 60:.1f} "
              f"min): every step at its timeout ({TIMEOUT_FACTOR:g} x its expected time), stopped within "
              f"{TERM_GRACE_S:g} s"]
    if gpus > ESTIMATED_FOR_GPUS:
        lines.append(f"# more than {ESTIMATED_FOR_GPUS} GPUs: the world-N steps take longer than estimated here")
    return lines


def shown(path: Path) -> str:
    """A path as the user types it from the repository's root."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def binaries_lines(binaries: Path, collectives, arch: str | None) -> list[str]:
    """Whether the vs-nccl-tests step finds its nccl-tests programs prebuilt (for this GPU's architecture; None: any,
    where no GPU is visible), else the CPU-side command that builds them (every collective's, for either node) and
    how they travel."""
    missing = nccl_tests().missing_programs(binaries, collectives, arch)
    if not missing:
        return [f"# nccl-tests: {', '.join(nccl_tests().BINARIES[name] for name in collectives)} prebuilt in "
                f"{shown(binaries)}"]
    return [f"# nccl-tests: MISSING from {shown(binaries)}: {', '.join(missing)}. vs-nccl-tests would build them on "
            "the GPU machine first, past its timeout. Build them on a CPU machine (nvcc, torch's NCCL wheel, no GPU):",
            f"    python benchmarks/vs_nccl_tests.py --build-only --arch {arch or DEFAULT_ARCH} --binaries "
            f"{shown(binaries)}",
            f"  and carry {shown(binaries)} with the checkout (git-ignored: the device tool's carry, or rsync/scp to "
            "the node)"]


def plan_line(step: Step, gpus: int) -> str:
    return f"- {step.name} [world {step.world(gpus)}, expected {step.expected_s(gpus):g} s, timeout " \
           f"{step.timeout_s(gpus)} s]: {step.what}"


def print_plan(steps: list[Step], skipped: list[Step], ctx: Context, arch: str | None) -> None:
    print(f"# plan ({'GPU' if ctx.gpu else 'CPU stand-ins'}) for a node of {ctx.gpus} GPU(s): world 1 and world N = "
          f"{ctx.gpus}")
    for step in steps:
        print(f"{plan_line(step, ctx.gpus)}\n    {command_text(step, ctx)}")
    for step in skipped:
        print(f"- {step.name}: not on a node of {ctx.gpus} GPU(s): {step.instead}")
    print("\n".join(["", *estimate_lines(Estimate(ctx.gpus, tuple(steps)))]))
    if any(step.name == "vs-nccl-tests" for step in steps):
        print("\n".join(binaries_lines(nccl_tests().DEFAULT_BINARIES, compared_collectives(ctx.gpus), arch)))
    print(flush=True)


def command_text(step: Step, ctx: Context) -> str:
    """The step's command as the plan shows it: cut where it reads another step's output (not there yet)."""
    try:
        command = step.command(ctx)
    except Exception as error:  # the step fails alone when it runs (run_one); the plan says why now
        return f"(no command: {type(error).__name__}: {error})"
    return " ".join(command) if not step.after else f"(after {', '.join(step.after)}) {' '.join(command[:5])} ..."


# ---- running the steps


@dataclass
class Outcome:
    step: str
    world: str
    mode: str
    seconds: float | None
    verdict: str
    detail: str


def run_one(step: Step, ctx: Context) -> Outcome:
    """The step in its own process group, its output kept in OUT/steps/, judged by its check; past its timeout the
    group is stopped and the step fails, with no check run on what it left."""
    mode, world = ("GPU" if ctx.gpu else "CPU stand-in"), step.world(ctx.gpus)
    timeout = step.timeout_s(ctx.gpus) * (1 if ctx.gpu else CPU_TIMEOUT_FACTOR)
    try:
        command = step.command(ctx)
    except Exception as error:  # a step whose command cannot be made fails alone: the check goes on
        return Outcome(step.name, world, mode, None, "FAIL", f"no command: {type(error).__name__}: {error}")
    result = run_step(command, timeout_s=timeout, cwd=ROOT)
    keep_output(ctx.out / "steps", step.name, result)
    if result.timed_out:
        return Outcome(step.name, world, mode, result.seconds, "FAIL", result.why(timeout))
    try:
        problem = step.check(ctx, result)
    except StepFailed as failure:
        problem = str(failure)
    except (OSError, ValueError, KeyError) as error:  # a missing or unreadable output is the step's failure
        problem = f"{type(error).__name__}: {error}"
    return Outcome(step.name, world, mode, result.seconds, "FAIL" if problem else "PASS", problem or "")


def keep_output(folder: Path, name: str, result: StepResult) -> None:
    """A step's stdout and stderr as NAME.out and NAME.err: the archive carries them, the table only a failure's
    last lines."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(result.stdout)
    (folder / f"{name}.err").write_text(result.stderr)


def run_all(steps: list[Step], ctx: Context) -> list[Outcome]:
    """Every step in order, whatever the earlier ones did: a failed or stopped step is one row of the table."""
    outcomes = []
    for step in steps:
        outcome = run_one(step, ctx)
        outcomes.append(outcome)
        print(f"{outcome.step}: {outcome.verdict} ({outcome.mode}, world {outcome.world}) {outcome.detail}",
              flush=True)
    return outcomes


def print_table(outcomes: list[Outcome]) -> None:
    print("\n| step | world | mode | seconds | result | detail |\n| --- | --- | --- | --- | --- | --- |")
    for outcome in outcomes:
        seconds = "-" if outcome.seconds is None else f"{outcome.seconds:.1f}"
        print(f"| {outcome.step} | {outcome.world} | {outcome.mode} | {seconds} | {outcome.verdict} | "
              f"{outcome.detail} |")


def visible_gpus() -> tuple[int, str | None]:
    """The CUDA GPUs visible here and the first one's compute capability ("90"), in a process of its own: this one
    starts no CUDA context before its steps."""
    probe = run_step([sys.executable, "-c", "import torch; n = torch.cuda.device_count(); "
                      "print(n, ''.join(map(str, torch.cuda.get_device_capability(0))) if n else '')"], timeout_s=120)
    words = probe.stdout.split() if probe.ok else []
    return (int(words[0]), words[1] if len(words) > 1 else None) if words else (0, None)


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


# ---- the archive


def commit_of(given: str | None) -> str:
    """The commit the check ran on (short hash, '+dirty' with uncommitted changes): --commit where the checkout has
    no .git (a device machine receives the working tree without it)."""
    if given:
        return given
    head = run_step(["git", "rev-parse", "--short", "HEAD"], timeout_s=30, cwd=ROOT)
    if not head.ok:
        return "unknown"
    dirty = run_step(["git", "status", "--porcelain", "--untracked-files=no"], timeout_s=30, cwd=ROOT).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def gpu_model(torch_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' → 'h100', 'NVIDIA GeForce RTX 5090' → 'geforce-rtx-5090': the words up to the first
    with a digit."""
    words = [word.lower() for word in torch_name.split() if word.upper() != "NVIDIA"]
    upto = next((index for index, word in enumerate(words) if any(char.isdigit() for char in word)), len(words) - 1)
    return "-".join(words[:upto + 1]) or "gpu"


def machine_name(ctx: Context, probes: dict | None) -> str:
    if not ctx.gpu:
        return "cpu-stand-in"
    devices = ((probes or {}).get("cuda") or {}).get("devices") or []
    return f"{gpu_model(devices[0]['torch_name']) if devices else 'gpu'}x{ctx.gpus}"


ARCHIVED_TEXTS = {
    "gpu_validation.json": "every step's outcome (step, world, mode, seconds, result, detail), the plan's estimate, "
                           "benchmarks/gpu_probes.py's probes, benchmarks/vs_nccl_tests.py's pairs and the launch "
                           "noise of the launch-noise step's run set with its key (backend, device type, world size)",
    "nvidia-smi.txt": "`nvidia-smi`, `nvidia-smi topo -m`, `nvidia-smi topo -p2p n`, `nvidia-smi nvlink -s` and "
                      "`nvidia-smi -q`, one after the other (benchmarks/node_facts.py)",
    "nvml.json": "NVML's answers (nvidia-ml-py) per GPU: name, PCI, architecture, memory and bus width, clocks, power "
                 "limit, PCIe generation and width, fabric, C2C, each NVLink link's state, version and remote end",
    "nccl-topo.xml": "NCCL's own topology (NCCL_TOPO_DUMP_FILE) of one communicator over the N GPUs; "
                     "`commbench expect --facts nccl-topo.xml` reads it",
    "nccl-tests-*.txt": "nccl-tests' output per collective, plain and with -C 1 (nccl-tests-cputime-*)",
    "commbench-perf-*.txt": "`commbench perf`'s output with the same flags",
    "steps/": "each step's stdout and stderr (STEP.out, STEP.err)",
}
"""What each file of the archive holds (its README.md)."""


def archive_readme(document: dict, names: list[str]) -> str:
    lines = [f"# {document['machine']}: benchmarks/gpu_validation.py, commit {document['commit']}, {document['date']}",
             "", f"A node of {document['gpus']} GPU(s), the check at world 1 and at world N = {document['gpus']}"
             f"{'' if document['gpu'] else ' (its CPU stand-ins: gloo on CPU tensors, 2 ranks)'}. Files:", ""]
    lines += [f"- `{name}`: {text}" for name, text in ARCHIVED_TEXTS.items()
              if any(fnmatch(found, name) for found in names)]
    return "\n".join(lines) + "\n"


def archive(folder: Path, ctx: Context, outcomes: list[Outcome], commit: str, estimate: Estimate) -> Path:
    """The node's archive in folder/MACHINE-DATE-COMMIT/ (the layout of tests/data/gpu/), and the same folder as
    ctx.out/MACHINE-DATE-COMMIT.tar.gz, the one file to attach to a report."""
    probes = _json_or_none(ctx.out / "probes.json")
    machine, day = machine_name(ctx, probes), time.strftime("%Y-%m-%d", time.gmtime())
    target = folder / f"{machine}-{day}-{commit.replace('+', '-')}"
    target.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine, "date": day, "commit": commit, "gpu": ctx.gpu, "gpus": ctx.gpus,
                "estimate": {"machine_start_s": MACHINE_START_S, "expected_s": estimate.expected_s,
                             "worst_s": estimate.worst_s, "budget_s": estimate.budget_s,
                             "steps": {step.name: step.expected_s(ctx.gpus) for step in estimate.steps}},
                "outcomes": [asdict(outcome) for outcome in outcomes], "probes": probes,
                "vs_nccl_tests": _json_or_none(ctx.out / "vs-nccl-tests.json"),
                "launch_noise": _launch_noise(ctx)}
    (target / "gpu_validation.json").write_text(json.dumps(document, indent=2) + "\n")
    copied = [path for path in (ctx.out / "node-facts" / name for name in FACT_FILES) if path.exists()]
    copied += sorted((ctx.out / "vs-nccl-tests").rglob("*.txt"))
    for path in copied:
        shutil.copy(path, target / path.name)
    if (ctx.out / "steps").is_dir():
        shutil.copytree(ctx.out / "steps", target / "steps", dirs_exist_ok=True)
    names = ["gpu_validation.json", *(path.name for path in copied), *(["steps/"] if (target / "steps").is_dir()
                                                                        else [])]
    (target / "README.md").write_text(archive_readme(document, names))
    shutil.make_archive(str(ctx.out / target.name), "gztar", root_dir=folder, base_dir=target.name)
    return target


def _launch_noise(ctx: Context) -> dict | None:
    """The launch-noise step's figure with its key (what gate/priors.MEASURED takes), None where it did not run."""
    found = _json_or_none(run_dir(ctx, LAUNCH_NOISE_RUN) / "run_set.json")
    if not isinstance(found, dict):
        return None
    backend, device = ("nccl", "cuda") if ctx.gpu else ("gloo", "cpu")
    return {"backend": backend, "device_type": device, "world_size": ctx.gpus if ctx.gpu else 2,
            "launch_noise_pct": found.get("launch_noise_pct"), "df": found.get("df")}


def _json_or_none(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


# ---- the command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/commbench-gpu-validation"))
    parser.add_argument("--dry-run", action="store_true", help="the plan, then every step's CPU stand-in")
    parser.add_argument("--plan", action="store_true", help="the plan and its estimate of device time; run nothing")
    parser.add_argument("--gpus", type=int, help="N, the node's GPUs: the plan's world N [default: every visible GPU; "
                                                 "1 where none is]")
    parser.add_argument("--only", default="", help="comma-separated step names [default: all]")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("--archive", type=Path, help="write the archive into ARCHIVE/MACHINE-DATE-COMMIT/")
    parser.add_argument("--commit", help="the commit to name in the archive [default: git's HEAD]")
    args = parser.parse_args(argv)
    args.names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(args.names) - {step.name for step in STEPS})
    if unknown:
        parser.error(f"unknown step(s) {unknown}; choose from {[step.name for step in STEPS]}")
    if args.gpus is not None and args.gpus < 1:
        parser.error(f"--gpus {args.gpus}: a node has 1 GPU or more")
    for name in ("out", "json", "archive"):  # the steps run from the repository's root: a relative path would move
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).absolute())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    real_run = not (args.dry_run or args.plan)
    found, arch = visible_gpus() if real_run or args.gpus is None else (0, None)
    if real_run and not found:
        print("no CUDA GPU is visible: run with --dry-run for the plan and the CPU stand-ins", file=sys.stderr)
        return 2
    if real_run and (args.gpus or 0) > found:
        print(f"--gpus {args.gpus}, but {found} CUDA GPU(s) are visible here", file=sys.stderr)
        return 2
    # --plan shows the GPU node's commands (it runs none); --dry-run the stand-ins it runs
    ctx = Context(out=args.out, gpu=not args.dry_run, gpus=args.gpus or max(1, found))
    steps = planned(ctx.gpus, args.names)
    if not args.plan:
        fresh_out(args.out)
    print_plan(steps, not_planned(ctx.gpus, args.names), ctx, arch)
    if args.plan:
        return 0
    outcomes = run_all(steps, ctx)
    print_table(outcomes)
    if args.json:
        args.json.write_text(json.dumps([asdict(outcome) for outcome in outcomes], indent=2))
    if args.archive:
        target = archive(args.archive, ctx, outcomes, commit_of(args.commit), Estimate(ctx.gpus, tuple(steps)))
        print(f"archived in {target}; as one file: {ctx.out / target.name}.tar.gz")
    return 0 if all(outcome.verdict != "FAIL" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
