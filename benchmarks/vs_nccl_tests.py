"""Benchmark (not a test): commbench's time per call against nccl-tests' own, on the same GPUs with the same NCCL.

NVIDIA's nccl-tests source (BSD; ../shared/vendor/nccl-tests, or a copy in the git-excluded .vendor/nccl-tests) is
built with nvcc against the NCCL torch loads (the nvidia-nccl wheel's headers and library), cudart linked statically
(CUDARTLIB=cudart_static: the binaries need only NCCL's lib folder on the loader path). Then, for each collective on N
GPUs, nccl-tests with one thread per GPU, as commbench runs one process per GPU (commbench perf accepts -t only at 1:
its -g N is the N ranks), and nccl-tests again with -C 1, which prints its host (CPU) time per call in the time column:

    X_perf           -b 8 -e 1G -f 4 -n 20 -w 5 -t N -g 1
    X_perf           -b 8 -e 1G -f 4 -n 20 -w 5 -t N -g 1 -C 1
    commbench perf X -b 8 -e 1G -f 4 -n 20 -w 5 -g N

and one `commbench sweep` of every collective at the same sizes with the sweep's default timing. Each text is read by
commbench's nccl-tests importer; per collective, size and placement the table gives nccl-tests' time and CPU time,
commbench's time, its stream hops, their ratio and the verdict (judge()):

- commbench may read at most nccl-tests + 1 µs at any size, plus 1 µs per stream hop its figure holds (a
  cross-stream wait nccl-tests never pays: commbench/measure/stream_hops.py), and within 3 % both ways where
  nccl-tests reads over 10 µs (the hops' allowance taken off first), within ±1 µs at or below 10 µs;
- it may read lower than that only where nccl-tests is host-bound by nccl-tests' own figures: its CPU time per call
  (-C 1) reaches HOST_BOUND_SHARE (0.8, commbench's own host-bound share) of its time per call. Then nccl-tests' time
  is its host's issue, not the device's, and the verdict is "lower (nccl-tests host-bound)"; elsewhere lower is
  OUTSIDE (not the same measurement).

    python benchmarks/vs_nccl_tests.py [--collectives a,b] [--json FILE]            # on a GPU node
    python benchmarks/vs_nccl_tests.py --build-only --arch 90 [--binaries DIR]       # anywhere with nvcc, no GPU
    python benchmarks/vs_nccl_tests.py --dry-run [--out DIR]                          # anywhere

--build-only builds the binaries into --binaries (default .vendor/nccl-tests-bin, git-ignored; 37 MiB for the seven
at sm_90, host debug sections stripped, under the 64 MiB that a carried path may take to a GPU machine), recording
each program's architecture in built.json; on a GPU the script runs the binaries found there and builds only those
missing or built for another architecture. nvcc: --cuda-home, else $CUDA_HOME, /usr/local/cuda or the toolkit
around the nvcc on PATH. Without a CUDA toolkit, pip's CUDA 13.0 wheels (torch 2.13's CUDA build loads CUDA 13.0
and nvidia-nccl-cu13 2.29.7) make one, outside the project's requirements:

    pip install --target /tmp/cuda-build "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" \\
        "nvidia-cuda-cccl==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" nvidia-nccl-cu13==2.29.7
    python benchmarks/vs_nccl_tests.py --build-only --arch 90 --cuda-home /tmp/cuda-build/nvidia/cu13 \\
        --nccl-home /tmp/cuda-build/nvidia/nccl

(nvcc's headers, cicc and libcudart_static.a are in that one folder; its lib/ is passed as CUDA_LIB, there being no
lib64.) Every make, nccl-tests and commbench run is a step in its own process group with a timeout
(benchmarks/process_group.py): a step that fails or runs past its timeout is one `FAILED step` line, its output in
OUT/steps/, and exit 1.

--dry-run prints the build line and every command, then runs the import/compare half on a vendored nccl-tests log
(tests/data/imports: a 2-rank RTX 5090 all_reduce, no -C 1 run) against `commbench perf` run here with that log's flags
on 2 gloo ranks (sizes cut to 4 MiB, fewer iterations): the verdicts exercise the comparison, not the goal. Exit code:
0 within the goal (a dry run or a build: it ran), 1 outside it or a step failed, 2 no GPU without --dry-run or
--build-only, or nothing to build with.
"""

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # nccl_tests_build, beside this script, also when imported from tests

from nccl_tests_build import (  # noqa: E402
    BINARIES,
    DEFAULT_BINARIES,
    SOURCES,
    StepFailed,
    build_command,
    build_missing,
    cuda_home,
    device_arch,
    missing_programs,
    source_dir,
    step,
    torch_nccl,
)
from process_group import run_step  # noqa: E402

from commbench.errors import CommbenchError  # noqa: E402
from commbench.imports import nccl_tests_text  # noqa: E402
from commbench.measure.spin_plan import HOST_BOUND_SHARE  # noqa: E402
from commbench.measure.stream_hops import allowance_us, hops_in, hops_per_iteration  # noqa: E402
from commbench.units import format_bytes  # noqa: E402

NEEDS_A_PEER = ("sendrecv",)
"""Collectives commbench runs only with two ranks or more (sendrecv sends to the next rank)."""
FLAGS = ("-b", "8", "-e", "1G", "-f", "4", "-n", "20", "-w", "5")
"""The flags both tools get, the GPUs added per machine: 8 B to 1 GiB by ×4, nccl-tests' default 20 calls per batch,
one call per iteration (no -m)."""
CPUTIME_FLAGS = ("-C", "1")
"""nccl-tests' report_cputime: the time column is then the host's time per call from its first issue to its last
call's return, before the stream sync (common.cu, BenchTime's cputimeSec), not the time to the device's end."""
SWEEP_SIZES = "8:1G:x4"
"""The same sizes as the flags above, as a sweep's --sizes."""
SLACK_US = 1.0
"""commbench may read at most this much above nccl-tests at any size (and below it at or under CLOSE_FROM_US)."""
CLOSE_PCT = 3.0
CLOSE_FROM_US = 10.0
"""...and within CLOSE_PCT of it, both ways, where nccl-tests' time exceeds CLOSE_FROM_US."""
NCCL_TESTS_HOST_BOUND_SHARE = HOST_BOUND_SHARE
"""nccl-tests is host-bound where its CPU time per call reaches this share of its time per call: its device waited
for its host, as commbench's own rule for its rows (spin_plan.HOST_BOUND_SHARE)."""
DRY_LOG = ROOT / "tests" / "data" / "imports" / "nccl-tests" / "rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt"
DRY_FLAGS = ("-b", "1M", "-e", "4M", "-f", "2", "-g", "2", "-n", "5", "-w", "1")
"""The vendored log's flags (-b 1M -f 2, 2 ranks), cut to 4 MiB and 5 calls so that the CPU run takes seconds."""


# ---- the verdict (pure)


def judge(nccl_tests_us: float, commbench_us: float | None, *, nccl_tests_host_bound: bool = False,
          hop_allowance_us: float = 0.0) -> str:
    """The goal for one size: 'ok'; 'lower (nccl-tests host-bound)' where commbench reads below the tolerance and
    nccl-tests' own CPU time shows its time is its host's; else what is outside the goal, beginning with 'OUTSIDE'.

    Above: at most SLACK_US more, and within CLOSE_PCT where nccl-tests exceeds CLOSE_FROM_US, after taking off
    hop_allowance_us (the stream hops commbench's figure holds and nccl-tests' does not). Below: within CLOSE_PCT above
    CLOSE_FROM_US, within SLACK_US at or under it; lower than that is excused only by nccl-tests being host-bound (the
    hops are not taken off there: they make commbench slower, never faster)."""
    if commbench_us is None:
        return "not measured"
    above_us = commbench_us - nccl_tests_us
    beyond_hops_us = above_us - hop_allowance_us
    hops = f" and {hop_allowance_us:g} µs for its stream hops" if hop_allowance_us else ""
    if beyond_hops_us > SLACK_US:
        return f"OUTSIDE: {above_us:.2f} µs slower (goal: at most +{SLACK_US:g} µs{hops})"
    device_bound_size = nccl_tests_us > CLOSE_FROM_US
    if device_bound_size and beyond_hops_us / nccl_tests_us * 100 > CLOSE_PCT:
        return f"OUTSIDE: {above_us / nccl_tests_us * 100:+.1f} % (goal: within {CLOSE_PCT:g} % above " \
               f"{CLOSE_FROM_US:g} µs{hops})"
    below_us = -above_us
    too_low = below_us / nccl_tests_us * 100 > CLOSE_PCT if device_bound_size else below_us > SLACK_US
    if not too_low:
        return "ok"
    if nccl_tests_host_bound:
        return "lower (nccl-tests host-bound)"
    unshown = "while nccl-tests' CPU time does not show it host-bound"
    if device_bound_size:
        return f"OUTSIDE: {-below_us / nccl_tests_us * 100:+.1f} % {unshown} (goal: within {CLOSE_PCT:g} % above " \
               f"{CLOSE_FROM_US:g} µs)"
    return f"OUTSIDE: {below_us:.2f} µs lower {unshown} (goal: within {SLACK_US:g} µs)"


def is_nccl_tests_host_bound(time_us: float, cputime_us: float | None) -> bool:
    """Whether nccl-tests' time per call is its host's: its CPU time per call (-C 1) reaches
    NCCL_TESTS_HOST_BOUND_SHARE of it. False where no CPU time was read: host-boundness is shown, not assumed."""
    return cputime_us is not None and time_us > 0 and cputime_us >= NCCL_TESTS_HOST_BOUND_SHARE * time_us


@dataclass(frozen=True)
class Pair:
    collective: str
    size_bytes: int
    placement: str
    nccl_tests_us: float
    commbench_us: float | None
    side: str
    """Which commbench figure: perf (its text) or sweep (its rows' median)."""
    nccl_tests_cpu_us: float | None = None
    """nccl-tests' host time per call at this key (its -C 1 run), None where that run printed none."""
    hops: int = 0
    """Stream hops per iteration in commbench's figure."""
    agg: int = 1
    """Calls per iteration, which share an iteration's hops."""
    host_bound: str = ""
    """commbench's own word on its row (the sweep's host_bound column)."""
    wrong: int | None = None
    """commbench's wrong elements at this size (its check), None where it printed none."""

    @property
    def ratio(self) -> float | None:
        return None if self.commbench_us is None or self.nccl_tests_us <= 0 else \
            self.commbench_us / self.nccl_tests_us

    @property
    def nccl_tests_host_bound(self) -> bool:
        return is_nccl_tests_host_bound(self.nccl_tests_us, self.nccl_tests_cpu_us)

    @property
    def verdict(self) -> str:
        if self.wrong:
            return f"OUTSIDE: {self.wrong} wrong elements in commbench's check"
        return judge(self.nccl_tests_us, self.commbench_us, nccl_tests_host_bound=self.nccl_tests_host_bound,
                     hop_allowance_us=allowance_us(self.hops, self.agg))


Key = tuple[str, int, str]
"""(collective, size in bytes, placement)."""


@dataclass(frozen=True)
class Measured:
    """One side's figure at one key."""

    time_us: float
    wrong: int | None = None
    host_bound: str = ""
    hops: int = 0
    agg: int = 1


# ---- reading the texts and the sweep (pure but for the sweep's files)


def read_text(text: str, name: str) -> dict[Key, Measured]:
    """Time per call in µs and #wrong per key, from nccl-tests' (or commbench perf's) text."""
    _, tests = nccl_tests_text.parse(text, name, collective=None, world_size=None, partial=False)
    return {(row.collective, row.size_bytes, "in-place" if row.inplace else "out-of-place"):
            Measured(row.time_us, row.n_wrong) for test in tests for row in test.rows if row.time_us == row.time_us}


_CPUTIME_HEADER = re.compile(r"^#\s+size\s+count\b.*\bcputime\b", re.MULTILINE)
"""writeResultHeader's column line under -C 1: `#  size  count  type  redop  root  cputime  algbw  busbw  #wrong
cputime ...` (util.cu), where a plain run prints `time`."""


def read_cputimes(text: str, name: str) -> dict[Key, float]:
    """nccl-tests' CPU time per call in µs per key, from the text of a -C 1 run; ValueError where the text's columns
    are not cputime (the flag was not taken: its times would pass for CPU times)."""
    if not _CPUTIME_HEADER.search(text):
        raise ValueError(f"{name}: no 'cputime' column header: not the text of an nccl-tests -C 1 run")
    return {key: measured.time_us for key, measured in read_text(text, name).items()}


def pairs_of(reference: dict[Key, Measured], ours: dict[Key, Measured], side: str,
             cputimes: dict[Key, float] | None = None) -> list[Pair]:
    """One pair per key of the reference (nccl-tests), commbench's figure None where it has none at that key."""
    pairs = []
    for key, theirs in sorted(reference.items()):
        mine = ours.get(key)
        pairs.append(Pair(*key, theirs.time_us, None, side, (cputimes or {}).get(key)) if mine is None else
                     Pair(*key, theirs.time_us, mine.time_us, side, (cputimes or {}).get(key), mine.hops, mine.agg,
                          mine.host_bound, mine.wrong))
    return pairs


def with_hops(measured: dict[Key, Measured], hops: int, agg: int) -> dict[Key, Measured]:
    """A perf text's figures with the stream hops its calls hold (its text does not say them)."""
    return {key: replace(value, hops=hops, agg=agg) for key, value in measured.items()}


def flag_value(flags, name: str, default: str) -> str:
    return next((flags[index + 1] for index, flag in enumerate(flags[:-1]) if flag == name), default)


def perf_hops(collective: str, *, backend: str, device: str) -> tuple[int, int]:
    """(stream hops per iteration, calls per iteration) of commbench perf's builtin calls with FLAGS' -m."""
    agg = int(flag_value(FLAGS, "-m", "1"))
    return hops_per_iteration(collective, backend=backend, device=device, agg=agg) or 0, agg


def read_sweep(run_dir: Path) -> dict[Key, Measured]:
    """A sweep's rows by key: the median time per call, the check's wrong elements, the host_bound word and the
    stream hops its timing_method states."""
    from commbench import store
    from commbench.benches.collective import KIND

    rows = store.read_results(run_dir, KIND)
    return {(str(row["collective"]), int(row["size_bytes"]), "in-place" if bool(row["inplace"]) else "out-of-place"):
            Measured(float(row["time_us_p50"]), None if row["n_wrong"] != row["n_wrong"] else int(row["n_wrong"]),
                     str(row.get("host_bound") or ""), hops_in(str(row.get("timing_method") or "")),
                     int(row.get("agg_iters") or 1)) for _, row in rows.iterrows()}


def table(pairs: list[Pair]) -> str:
    lines = ["| collective | size | placement | nccl-tests (µs) | nccl-tests CPU (µs) | commbench (µs) | side | hops | "
             "commbench / nccl-tests | host-bound | verdict |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |"]
    for pair in pairs:
        ours = "-" if pair.commbench_us is None else f"{pair.commbench_us:.2f}"
        cpu = "-" if pair.nccl_tests_cpu_us is None else f"{pair.nccl_tests_cpu_us:.2f}"
        ratio = "-" if pair.ratio is None else f"{pair.ratio:.3f}"
        lines.append(f"| {pair.collective} | {format_bytes(pair.size_bytes)} | {pair.placement} | "
                     f"{pair.nccl_tests_us:.2f} | {cpu} | {ours} | {pair.side} | {pair.hops} | {ratio} | "
                     f"{pair.host_bound or '-'} | {pair.verdict} |")
    return "\n".join(lines)


# ---- running both (GPU machines)


@dataclass(frozen=True)
class Commands:
    nccl_tests: list[str]
    nccl_tests_cputime: list[str]
    perf: list[str]


def commands(collective: str, binaries: Path, out: Path, ngpus: int) -> Commands:
    """One thread per GPU in nccl-tests (-t N -g 1: -g N would issue every GPU from one thread, whose host then
    bounds its small sizes); commbench perf takes -t only at 1 and runs one process per GPU, so -g N ranks."""
    program = [str(binaries / BINARIES[collective]), *FLAGS, "-t", str(ngpus), "-g", "1"]
    return Commands(program, [*program, *CPUTIME_FLAGS],
                    [sys.executable, "-m", "commbench", "perf", collective, *FLAGS, "-g", str(ngpus), "--out",
                     str(out / "runs"), "--run-id", f"perf-{collective}"])


def sweep_command(collectives, out: Path, ngpus: int) -> list[str]:
    return [sys.executable, "-m", "commbench", "sweep", "-c", ",".join(collectives), "--sizes", SWEEP_SIZES,
            "--placement", "both", "--backend", "nccl", "--device", "cuda", "--nproc", str(ngpus), "--out",
            str(out / "runs"), "--run-id", "sweep", "--quiet"]


def on_gpu(args, collectives: list[str], ngpus: int) -> tuple[list[Pair], dict]:
    nccl = torch_nccl()
    home = args.nccl_home or (Path(nccl["home"]) if nccl["home"] else None)
    if home is None:
        raise StepFailed(f"FAILED step build: torch's NCCL was not found: {nccl.get('why')}")
    make = build_missing(source_dir(args.source), args.binaries, args.out, home, cuda_home(args.cuda_home),
                         device_arch(args.arch), collectives, args.build_timeout)
    # cudart is linked in: NCCL's lib folder is all the binaries need beside the driver
    env = {**os.environ, "LD_LIBRARY_PATH": f"{home / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    texts, logs = args.out / "texts", args.out / "steps"
    texts.mkdir(exist_ok=True)
    pairs: list[Pair] = []
    references: dict[Key, Measured] = {}
    cputimes: dict[Key, float] = {}
    for collective in collectives:
        run = commands(collective, args.binaries, args.out, ngpus)
        names = (f"nccl-tests-{collective}", f"nccl-tests-{collective}-cputime", f"perf-{collective}")
        reference = step(names[0], run.nccl_tests, timeout_s=args.timeout, logs=logs, env=env)
        host = step(names[1], run.nccl_tests_cputime, timeout_s=args.timeout, logs=logs, env=env)
        ours = step(names[2], run.perf, timeout_s=args.timeout, logs=logs)
        for name, text in zip((f"nccl-tests-{collective}", f"nccl-tests-cputime-{collective}",
                               f"commbench-perf-{collective}"), (reference, host, ours)):
            (texts / f"{name}.txt").write_text(text)
        theirs = read_step_text(read_text, reference, names[0])
        cputimes.update(read_step_text(read_cputimes, host, names[1]))
        mine = read_step_text(read_text, ours, names[2])
        references.update(theirs)
        pairs += pairs_of(theirs, with_hops(mine, *perf_hops(collective, backend="nccl", device="cuda")), "perf",
                          cputimes)
    step("sweep", sweep_command(collectives, args.out, ngpus), timeout_s=args.timeout * len(collectives), logs=logs)
    pairs += pairs_of(references, read_sweep(args.out / "runs" / "sweep"), "sweep", cputimes)
    versions = {"nccl_torch": nccl["version"], "nccl_tests_header": _header_line(texts), "make": make}
    return pairs, versions


def read_step_text(reader, text: str, name: str):
    """reader(text, name): a step's text read; a text that does not read is that step failing, in one line."""
    try:
        return reader(text, name)
    except (ValueError, CommbenchError) as error:
        raise StepFailed(f"FAILED step {name}: its text does not read: {error}") from None


def _header_line(texts: Path) -> str:
    for path in sorted(texts.glob("nccl-tests-*.txt")):
        for line in path.read_text().splitlines():
            if "nccl-tests version" in line:
                return line.strip("# ")
    return ""


# ---- the dry run (anywhere)


def dry_run(args, collectives: list[str]) -> list[Pair]:
    source = source_dir(args.source)
    nccl = torch_nccl()
    print("# dry run: the plan on a GPU node")
    missing = missing_programs(args.binaries, collectives, args.arch)
    make = build_command(source or SOURCES[0], args.out / "build", "<torch's nvidia-nccl wheel>/nccl-home",
                         cuda_home(args.cuda_home), "-gencode=arch=compute_XY,code=sm_XY (this GPU's)", missing)
    where = "" if source else f"  (no source here: it would be {SOURCES[0]})"
    have = f"prebuilt in {args.binaries}: {len(collectives) - len(missing)} of {len(collectives)}"
    print(f"- binaries: {have}\n- build: {' '.join(make) if missing else 'none'}{where}\n"
          f"  NCCL torch loads: {nccl.get('version') or nccl.get('why')}")
    for collective in collectives:
        run = commands(collective, args.binaries, args.out, 1)
        print(f"- {collective}:\n    {' '.join(run.nccl_tests)}\n    {' '.join(run.nccl_tests_cputime)}\n"
              f"    {' '.join(run.perf)}")
    print(f"- sweep, default timing:\n    {' '.join(sweep_command(collectives, args.out, 1))}")
    print(f"\n# the import/compare half: {DRY_LOG.name} (nccl-tests, 2 ranks on one RTX 5090, no -C 1 run) against "
          "commbench perf here with its flags on 2 gloo ranks (cut to 4 MiB): the verdicts exercise the comparison, "
          "not the goal")
    perf = [sys.executable, "-m", "commbench", "perf", "all_reduce", *DRY_FLAGS, "--backend", "gloo", "--device",
            "cpu", "--out", str(args.out / "runs"), "--run-id", "dry-perf"]
    ours = step("dry-perf", perf, timeout_s=args.timeout, logs=args.out / "steps")
    (args.out / "commbench-perf-all_reduce.txt").write_text(ours)
    reference = read_text(DRY_LOG.read_text(), DRY_LOG.name)
    measured = with_hops(read_text(ours, "commbench perf (dry run)"),
                         *perf_hops("all_reduce", backend="gloo", device="cpu"))
    return [pair for pair in pairs_of(reference, measured, "perf") if pair.commbench_us is not None]


def spin_plan_lines(issue_us: list[float], units: int = 20) -> list[str]:
    """What the spin-ahead batch would do at these issue times per call (spin_plan's arithmetic)."""
    from commbench.measure.spin_plan import batch_plan

    lines = [f"# spin plan for a batch of {units} calls (-n {units}) at each issue time per call"]
    for value in issue_us:
        plan = batch_plan(units, value * 1e-6)
        spin_ms = plan.spin_s(plan.per_segment) * 1e3
        lines.append(f"- issue {value:g} µs/call: segments {plan.segments}, a {spin_ms:.3g} ms spin ahead of "
                     f"{plan.per_segment} calls, which issue in {value * plan.per_segment / 1e3:.3g} ms")
    return lines


# ---- the command line


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/commbench-vs-nccl-tests"))
    parser.add_argument("--dry-run", action="store_true", help="the plan, then the compare half on a vendored log")
    parser.add_argument("--collectives", default="", help=f"comma-separated [default: {', '.join(BINARIES)}, "
                                                          "sendrecv with 2 GPUs or more; --build-only: all]")
    parser.add_argument("--source", type=Path, help="nccl-tests' source folder [default: .vendor/nccl-tests, then "
                                                    "../shared/vendor/nccl-tests]")
    parser.add_argument("--binaries", type=Path, default=DEFAULT_BINARIES,
                        help="the built nccl-tests programs: --build-only writes them here, a GPU run uses them and "
                             "builds only the missing ones [default: .vendor/nccl-tests-bin]")
    parser.add_argument("--cuda-home", help="the CUDA toolkit with bin/nvcc (e.g. pip's /tmp/cuda-build/nvidia/cu13) "
                                            "[default: $CUDA_HOME, /usr/local/cuda, the nvcc on PATH]")
    parser.add_argument("--nccl-home", type=Path, help="NCCL's include/ and lib/libnccl.so.2 [default: the "
                                                       "nvidia-nccl wheel torch loads]")
    parser.add_argument("--ngpus", type=int, help="GPUs to run on, one nccl-tests thread and one commbench rank each "
                                                  "[default: every visible one]")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run")
    parser.add_argument("--build-timeout", type=float, default=600)
    parser.add_argument("--plan-issue-us", default="15,29,49", help="issue times per call (µs) to print the spin "
                                                                     "plan for")
    parser.add_argument("--json", type=Path, help="also write the pairs, versions and commands here")
    parser.add_argument("--arch", help="compute capability to build for, e.g. 90 [default: this GPU's]")
    parser.add_argument("--build-only", action="store_true", help="build the missing nccl-tests programs into "
                                                                  "--binaries and stop (nvcc and NCCL, no GPU)")
    args = parser.parse_args(argv)
    names = [name for name in args.collectives.split(",") if name]
    unknown = sorted(set(names) - set(BINARIES))
    if unknown:
        parser.error(f"unknown collective(s) {unknown}; choose from {list(BINARIES)}")
    args.names = names
    # absolute before anything runs: make -C src and the steps' cwd would read a relative path from elsewhere
    for name in ("out", "binaries", "source", "nccl_home", "json"):
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).absolute())
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return _main(args)
    except StepFailed as failed:
        print(str(failed), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"dry_run": args.dry_run, "failed_step": str(failed), "pairs": []},
                                            indent=2))
        return 1


def _main(args) -> int:
    if args.build_only:
        return _build_only(args, args.names or list(BINARIES))
    gpus = _gpus()
    if not gpus and not args.dry_run:
        print("no CUDA GPU is visible: run with --dry-run for the plan and the compare half", file=sys.stderr)
        return 2
    ngpus = args.ngpus or max(1, gpus)
    collectives = args.names or [name for name in BINARIES if ngpus > 1 or name not in NEEDS_A_PEER]
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (args.out / "runs", args.out / "texts", args.out / "steps"):  # a rerun in place starts afresh
        shutil.rmtree(path, ignore_errors=True)
    versions: dict = {}
    if args.dry_run:
        pairs = dry_run(args, collectives)
    else:
        pairs, versions = on_gpu(args, collectives, ngpus)
    print("\n" + table(pairs))
    print("\n".join(["", *spin_plan_lines([float(value) for value in args.plan_issue_us.split(",") if value])]))
    outside = [pair for pair in pairs if pair.verdict.startswith("OUTSIDE")]
    lower = [pair for pair in pairs if pair.verdict.startswith("lower")]
    print(f"\n# {len(pairs)} pairs: {len(outside)} outside the goal, {len(lower)} lower than nccl-tests where "
          "nccl-tests' own CPU time shows it host-bound" + (" [dry run: not judged]" if args.dry_run else ""))
    if args.json:
        args.json.write_text(json.dumps({"dry_run": args.dry_run, "versions": versions,
                                         "pairs": [{**asdict(pair), "ratio": pair.ratio, "verdict": pair.verdict,
                                                    "nccl_tests_host_bound": pair.nccl_tests_host_bound}
                                                   for pair in pairs]}, indent=2))
    return 0 if args.dry_run or not outside else 1


def _build_only(args, collectives: list[str]) -> int:
    nccl = {} if args.nccl_home else torch_nccl()  # torch's import is seconds: only where no NCCL was named
    home = args.nccl_home or (Path(nccl["home"]) if nccl["home"] else None)
    if home is None:
        print(f"nothing to build with: {nccl.get('why')}", file=sys.stderr)
        return 2
    if not args.arch:
        print("--build-only needs --arch (no GPU to read it from), e.g. --arch 90 for an H100 or H200",
              file=sys.stderr)
        return 2
    build_missing(source_dir(args.source), args.binaries, args.out, home, cuda_home(args.cuda_home), args.arch,
                  collectives, args.build_timeout)
    return 0


def _gpus() -> int:
    probe = run_step([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"], timeout_s=120)
    return int(probe.stdout.strip() or 0) if probe.ok else 0


if __name__ == "__main__":
    sys.exit(main())
