"""The GPU check's steps (gpu_validation.py): each step's command and the check of its output, the constants they use,
and STEPS, every step in run order with its world, its expected times and the property it must show."""

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

from gpu_check_context import (
    ROOT,
    Context,
    Step,
    checked_rows,
    commbench,
    every_gpu,
    exit_0,
    no_ranks,
    on_device,
    on_the_one_gpu,
    one_rank,
    replay_world,
    run_dir,
)
from process_group import StepResult

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

