"""Benchmark (not a test): commbench's time per call against nccl-tests' own, on the same GPUs with the same NCCL.

NVIDIA's nccl-tests source (BSD; ../shared/vendor/nccl-tests, or a copy in the git-excluded .vendor/nccl-tests that
travels to a GPU machine) is built with nvcc against the NCCL that torch loads (the nvidia-nccl wheel's headers and
library), then for each collective both run with the same flags:

    X_perf           -b 8 -e 1G -f 4 -g N -n 20 -w 5
    commbench perf X -b 8 -e 1G -f 4 -g N -n 20 -w 5

and one `commbench sweep` of every collective at the same sizes with the sweep's default timing. Each text is read by
commbench's nccl-tests importer; per collective, size and placement the table gives nccl-tests' time, commbench's and
their ratio. The goal: commbench's time is at most nccl-tests' + 1 µs at every size (no host overhead of its own) and
within 3 % of it wherever nccl-tests' time exceeds 10 µs. Where commbench reads lower at tiny sizes, nccl-tests' own
issue path from C (2–5 µs per call) is the longer one: the table says so.

    python benchmarks/vs_nccl_tests.py [--out DIR] [--collectives a,b] [--json FILE]   # on a GPU node
    python benchmarks/vs_nccl_tests.py --dry-run [--out DIR]                             # anywhere

--dry-run prints the build line and every command pair, then runs the import/compare half on a vendored nccl-tests
log (tests/data/imports: a 2-rank RTX 5090 all_reduce) against `commbench perf` run here with that log's flags on 2
gloo ranks (sizes cut to 4 MiB, fewer iterations): the verdicts exercise the comparison, not the goal. Exit code: 0
within the goal (a dry run: the comparison ran), 1 outside it, 2 no GPU without --dry-run.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commbench.imports import nccl_tests_text  # noqa: E402
from commbench.units import format_bytes  # noqa: E402

SOURCES = (ROOT / ".vendor" / "nccl-tests", ROOT.parent / "shared" / "vendor" / "nccl-tests")
"""Where nccl-tests' source is looked for: the copy that travels with the checkout, then ../shared."""
BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
            "broadcast": "broadcast_perf", "reduce": "reduce_perf", "all_to_all": "alltoall_perf",
            "sendrecv": "sendrecv_perf"}
"""commbench's collective → nccl-tests' program (commbench perf takes either name)."""
NEEDS_A_PEER = ("sendrecv",)
"""Collectives commbench runs only with two ranks or more (sendrecv sends to the next rank)."""
FLAGS = ("-b", "8", "-e", "1G", "-f", "4", "-n", "20", "-w", "5")
"""The issue's flags, -g added per machine: 8 B to 1 GiB by ×4, nccl-tests' default 20 calls per batch."""
SWEEP_SIZES = "8:1G:x4"
"""The same sizes as the flags above, as a sweep's --sizes."""
SLACK_US = 1.0
"""commbench may read at most this much above nccl-tests at any size."""
CLOSE_PCT = 3.0
CLOSE_FROM_US = 10.0
"""...and within CLOSE_PCT of it where nccl-tests' time exceeds CLOSE_FROM_US."""
DRY_LOG = ROOT / "tests" / "data" / "imports" / "nccl-tests" / "rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt"
DRY_FLAGS = ("-b", "1M", "-e", "4M", "-f", "2", "-g", "2", "-n", "5", "-w", "1")
"""The vendored log's flags (-b 1M -f 2, 2 ranks), cut to 4 MiB and 5 calls so that the CPU run takes seconds."""


@dataclass(frozen=True)
class Pair:
    collective: str
    size_bytes: int
    placement: str
    nccl_tests_us: float
    commbench_us: float | None
    side: str
    """Which commbench figure: perf (its text) or sweep (its rows' median)."""
    host_bound: str = ""
    wrong: int | None = None
    """commbench's wrong elements at this size (its check), None where it printed none."""

    @property
    def ratio(self) -> float | None:
        return None if self.commbench_us is None or self.nccl_tests_us <= 0 else \
            self.commbench_us / self.nccl_tests_us

    @property
    def verdict(self) -> str:
        if self.wrong:
            return f"OUTSIDE: {self.wrong} wrong elements in commbench's check"
        return judge(self.nccl_tests_us, self.commbench_us)


def judge(nccl_tests_us: float, commbench_us: float | None) -> str:
    """The goal for one size: 'ok', 'lower' (commbench below nccl-tests by more than the slack where nccl-tests is
    at most 10 µs: its C issue path is the longer), or what is outside the goal, beginning with 'OUTSIDE'."""
    if commbench_us is None:
        return "not measured"
    if commbench_us > nccl_tests_us + SLACK_US:
        return f"OUTSIDE: {commbench_us - nccl_tests_us:.2f} µs slower (goal: at most +{SLACK_US:g} µs)"
    off_pct = (commbench_us / nccl_tests_us - 1) * 100 if nccl_tests_us > 0 else 0.0
    if nccl_tests_us > CLOSE_FROM_US and abs(off_pct) > CLOSE_PCT:
        return f"OUTSIDE: {off_pct:+.1f} % (goal: within {CLOSE_PCT:g} % above {CLOSE_FROM_US:g} µs)"
    if commbench_us < nccl_tests_us - SLACK_US and nccl_tests_us <= CLOSE_FROM_US:
        return "lower: nccl-tests' own issue from C is the longer path here"
    return "ok"


Key = tuple[str, int, str]
"""(collective, size in bytes, placement)."""


@dataclass(frozen=True)
class Measured:
    """One side's figure at one key."""

    time_us: float
    wrong: int | None = None
    host_bound: str = ""


def read_text(text: str, name: str) -> dict[Key, Measured]:
    """Time per call in µs and #wrong per key, from nccl-tests' (or commbench perf's) text."""
    _, tests = nccl_tests_text.parse(text, name, collective=None, world_size=None, partial=False)
    return {(row.collective, row.size_bytes, "in-place" if row.inplace else "out-of-place"):
            Measured(row.time_us, row.n_wrong) for test in tests for row in test.rows if row.time_us == row.time_us}


def pairs_of(reference: dict[Key, Measured], ours: dict[Key, Measured], side: str) -> list[Pair]:
    pairs = []
    for key, theirs in sorted(reference.items()):
        mine = ours.get(key)
        pairs.append(Pair(*key, theirs.time_us, None if mine is None else mine.time_us, side,
                          "" if mine is None else mine.host_bound, None if mine is None else mine.wrong))
    return pairs


def read_sweep(run_dir: Path) -> dict[Key, Measured]:
    """A sweep's rows by key: the median time per call, the check's wrong elements and the host_bound word."""
    from commbench import store
    from commbench.benches.collective import KIND

    rows = store.read_results(run_dir, KIND)
    return {(str(row["collective"]), int(row["size_bytes"]), "in-place" if bool(row["inplace"]) else "out-of-place"):
            Measured(float(row["time_us_p50"]), None if row["n_wrong"] != row["n_wrong"] else int(row["n_wrong"]),
                     str(row.get("host_bound") or "")) for _, row in rows.iterrows()}


def table(pairs: list[Pair]) -> str:
    lines = ["| collective | size | placement | nccl-tests (µs) | commbench (µs) | side | commbench / nccl-tests | "
             "host-bound | verdict |", "| --- | --- | --- | ---: | ---: | --- | ---: | --- | --- |"]
    for pair in pairs:
        ours = "-" if pair.commbench_us is None else f"{pair.commbench_us:.2f}"
        ratio = "-" if pair.ratio is None else f"{pair.ratio:.3f}"
        lines.append(f"| {pair.collective} | {format_bytes(pair.size_bytes)} | {pair.placement} | "
                     f"{pair.nccl_tests_us:.2f} | {ours} | {pair.side} | {ratio} | {pair.host_bound or '-'} | "
                     f"{pair.verdict} |")
    return "\n".join(lines)


# ---- building and running nccl-tests (GPU machines)


def source_dir(given: Path | None) -> Path | None:
    candidates = (given,) if given else SOURCES
    return next((path for path in candidates if path and (path / "src" / "common.cu").exists()), None)


def torch_nccl() -> dict:
    """The NCCL torch loads: the nvidia-nccl wheel's folder (include/nccl.h, lib/libnccl.so.2) and its version."""
    found: dict = {"version": None, "home": None}
    try:
        import torch

        if torch.cuda.is_available():
            found["version"] = ".".join(map(str, torch.cuda.nccl.version()))
    except (ImportError, RuntimeError) as error:
        found["why"] = f"{type(error).__name__}: {error}"
    try:
        import nvidia.nccl  # type: ignore[import-not-found]  # the wheel torch's CUDA build depends on

        found["home"] = str(Path(list(nvidia.nccl.__path__)[0]))
    except ImportError:
        found["why"] = "the nvidia-nccl wheel is not installed here (a CPU build of torch)"
    return found


def nccl_home_for_make(wheel_home: Path, build: Path) -> Path:
    """nccl-tests links -lnccl: a folder whose lib/libnccl.so points at the wheel's libnccl.so.2."""
    home = build / "nccl-home"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    for name, target in (("include", wheel_home / "include"), ("lib/libnccl.so", wheel_home / "lib" / "libnccl.so.2")):
        link = home / name
        if not link.exists():
            link.symlink_to(target)
    return home


def gencode(arch: str | None) -> str:
    """One architecture, this GPU's (or --arch): nccl-tests' default list compiles for six and takes minutes."""
    if not arch:
        import torch

        arch = "".join(map(str, torch.cuda.get_device_capability(0)))
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def build_command(source: Path, build: Path, nccl_home: str, cuda_home: str, code: str, collectives) -> list[str]:
    targets = [str(build / BINARIES[name]) for name in collectives]
    return ["make", "-C", str(source / "src"), f"-j{os.cpu_count() or 4}", f"NCCL_HOME={nccl_home}",
            f"CUDA_HOME={cuda_home}", f"BUILDDIR={build}", f"NVCC_GENCODE={code}", "os.build", *targets]


def cuda_home() -> str:
    """$CUDA_HOME, /usr/local/cuda, or the toolkit around the nvcc on PATH: the first with bin/nvcc and the runtime's
    headers (an nvcc on PATH may be a wrapper script outside the toolkit)."""
    nvcc = shutil.which("nvcc")
    candidates = (os.environ.get("CUDA_HOME"), "/usr/local/cuda", nvcc and str(Path(nvcc).resolve().parent.parent))
    for candidate in filter(None, candidates):
        if (Path(candidate) / "bin" / "nvcc").exists() and (Path(candidate) / "include" / "cuda_runtime.h").exists():
            return candidate
    return "/usr/local/cuda"


def commands(collective: str, build: Path, out: Path, ngpus: int) -> tuple[list[str], list[str]]:
    flags = [*FLAGS, "-g", str(ngpus)]
    return ([str(build / BINARIES[collective]), *flags],
            [sys.executable, "-m", "commbench", "perf", collective, *flags, "--out", str(out / "runs"),
             "--run-id", f"perf-{collective}"])


def sweep_command(collectives, out: Path, ngpus: int) -> list[str]:
    return [sys.executable, "-m", "commbench", "sweep", "-c", ",".join(collectives), "--sizes", SWEEP_SIZES,
            "--placement", "both", "--backend", "nccl", "--device", "cuda", "--nproc", str(ngpus), "--out",
            str(out / "runs"), "--run-id", "sweep", "--quiet"]


def run(command: list[str], *, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    print(f"  {time.monotonic() - started:6.1f} s  exit {done.returncode}  {' '.join(command[:6])} ...", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done


def on_gpu(args, collectives: list[str], ngpus: int) -> tuple[list[Pair], dict]:
    source = source_dir(args.source)
    if source is None:
        raise SystemExit(f"no nccl-tests source at {' or '.join(map(str, SOURCES))}: copy ../shared/vendor/nccl-tests "
                         "to .vendor/nccl-tests (git-excluded) so that it travels with the checkout")
    nccl = torch_nccl()
    if not nccl["home"]:
        raise SystemExit(f"torch's NCCL was not found: {nccl.get('why')}")
    build = args.out / "build"
    make = build_nccl_tests(source, build, Path(nccl["home"]), args.arch, collectives, args.build_timeout)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{Path(nccl['home']) / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    texts = args.out / "texts"
    texts.mkdir(exist_ok=True)
    pairs: list[Pair] = []
    references: dict[Key, Measured] = {}
    for collective in collectives:
        reference_cmd, perf_cmd = commands(collective, build, args.out, ngpus)
        reference = run(reference_cmd, timeout=args.timeout, env=env).stdout
        ours = run(perf_cmd, timeout=args.timeout).stdout
        (texts / f"nccl-tests-{collective}.txt").write_text(reference)
        (texts / f"commbench-perf-{collective}.txt").write_text(ours)
        references.update(read_text(reference, f"nccl-tests {collective}"))
        pairs += pairs_of(read_text(reference, f"nccl-tests {collective}"),
                          read_text(ours, f"commbench perf {collective}"), "perf")
    run(sweep_command(collectives, args.out, ngpus), timeout=args.timeout * len(collectives))
    pairs += pairs_of(references, read_sweep(args.out / "runs" / "sweep"), "sweep")
    versions = {"nccl_torch": nccl["version"], "nccl_tests_header": _header_line(texts), "make": make}
    return pairs, versions


def build_nccl_tests(source: Path, build: Path, wheel_home: Path, arch: str | None, collectives,
                     timeout: float) -> list[str]:
    build.mkdir(parents=True, exist_ok=True)
    make = build_command(source, build, str(nccl_home_for_make(wheel_home, build)), cuda_home(), gencode(arch),
                         collectives)
    print("# build:", " ".join(make), flush=True)
    run(make, timeout=timeout)
    return make


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
    build = args.out / "build"
    print("# dry run: the plan on a GPU node")
    make = build_command(source or SOURCES[0], build, "<torch's nvidia-nccl wheel>/nccl-home", cuda_home(),
                         "-gencode=arch=compute_XY,code=sm_XY (this GPU's)", collectives)
    where = "" if source else f"  (no source here: it would be {SOURCES[0]})"
    print(f"- build: {' '.join(make)}{where}\n  NCCL torch loads: {nccl.get('version') or nccl.get('why')}")
    for collective in collectives:
        reference_cmd, perf_cmd = commands(collective, build, args.out, 1)
        print(f"- {collective}:\n    {' '.join(reference_cmd)}\n    {' '.join(perf_cmd)}")
    print(f"- sweep, default timing:\n    {' '.join(sweep_command(collectives, args.out, 1))}")
    print(f"\n# the import/compare half: {DRY_LOG.name} (nccl-tests, 2 ranks on one RTX 5090) against commbench perf "
          "here with its flags on 2 gloo ranks (cut to 4 MiB): the verdicts exercise the comparison, not the goal")
    perf = [sys.executable, "-m", "commbench", "perf", "all_reduce", *DRY_FLAGS, "--backend", "gloo", "--device",
            "cpu", "--out", str(args.out / "runs"), "--run-id", "dry-perf"]
    ours = run(perf, timeout=args.timeout).stdout
    (args.out / "commbench-perf-all_reduce.txt").write_text(ours)
    reference = read_text(DRY_LOG.read_text(), DRY_LOG.name)
    measured = read_text(ours, "commbench perf (dry run)")
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/commbench-vs-nccl-tests"))
    parser.add_argument("--dry-run", action="store_true", help="the plan, then the compare half on a vendored log")
    parser.add_argument("--collectives", default="", help=f"comma-separated [default: {', '.join(BINARIES)}, "
                                                          "sendrecv with 2 GPUs or more]")
    parser.add_argument("--source", type=Path, help="nccl-tests' source folder [default: .vendor/nccl-tests, then "
                                                    "../shared/vendor/nccl-tests]")
    parser.add_argument("--ngpus", type=int, help="-g: GPUs to run on [default: every visible one]")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run")
    parser.add_argument("--build-timeout", type=float, default=300)
    parser.add_argument("--plan-issue-us", default="15,29,49", help="issue times per call (µs) to print the spin "
                                                                     "plan for")
    parser.add_argument("--json", type=Path, help="also write the pairs, versions and commands here")
    parser.add_argument("--arch", help="compute capability to build for, e.g. 90 [default: this GPU's]")
    parser.add_argument("--build-only", action="store_true", help="build nccl-tests against torch's NCCL and stop "
                                                                  "(needs nvcc and the nvidia-nccl wheel, no GPU)")
    args = parser.parse_args()
    names = [name for name in args.collectives.split(",") if name]
    unknown = sorted(set(names) - set(BINARIES))
    if unknown:
        parser.error(f"unknown collective(s) {unknown}; choose from {list(BINARIES)}")
    if args.build_only:
        return _build_only(args, names or list(BINARIES))
    gpus = _gpus()
    if not gpus and not args.dry_run:
        print("no CUDA GPU is visible: run with --dry-run for the plan and the compare half", file=sys.stderr)
        return 2
    ngpus = args.ngpus or max(1, gpus)
    collectives = names or [name for name in BINARIES if ngpus > 1 or name not in NEEDS_A_PEER]
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (args.out / "runs",):  # a rerun in place starts from no earlier run folder
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
    print(f"\n# {len(pairs)} pairs: {len(outside)} outside the goal, {len(lower)} lower than nccl-tests where its own "
          f"C issue path is the longer (≤ {CLOSE_FROM_US:g} µs)" + (" [dry run: not judged]" if args.dry_run else ""))
    if args.json:
        args.json.write_text(json.dumps({"dry_run": args.dry_run, "versions": versions,
                                         "pairs": [{**asdict(pair), "ratio": pair.ratio, "verdict": pair.verdict}
                                                   for pair in pairs]}, indent=2))
    return 0 if args.dry_run or not outside else 1


def _build_only(args, collectives: list[str]) -> int:
    source, nccl = source_dir(args.source), torch_nccl()
    if source is None or not nccl["home"]:
        print(f"nothing to build: source {source}, torch's NCCL {nccl.get('why') or nccl['home']}", file=sys.stderr)
        return 2
    build_nccl_tests(source, args.out / "build", Path(nccl["home"]), args.arch, collectives, args.build_timeout)
    return 0


def _gpus() -> int:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True)
    return int(probe.stdout.strip() or 0)


if __name__ == "__main__":
    sys.exit(main())
