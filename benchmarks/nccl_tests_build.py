"""Building NVIDIA's nccl-tests for benchmarks/vs_nccl_tests.py, on a GPU machine or on the CPU side (--build-only), and
the steps every make, nccl-tests and commbench run of that script goes through (each in its own process group with a
timeout: benchmarks/process_group.py). vs_nccl_tests.py's docstring gives the commands and the toolkit it needs."""

import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))  # process_group, beside this module, also when imported from tests

from process_group import run_step  # noqa: E402

SOURCES = (ROOT / ".vendor" / "nccl-tests", ROOT.parent / "shared" / "vendor" / "nccl-tests")
"""Where nccl-tests' source is looked for: a copy beside the checkout, then ../shared."""
DEFAULT_BINARIES = ROOT / ".vendor" / "nccl-tests-bin"
"""Where --build-only puts the binaries and a GPU run looks for them: git-ignored, so it travels to a GPU machine
only as a carried path, whose limit is CARRY_LIMIT_BYTES."""
CARRY_LIMIT_BYTES = 64 << 20
BINARIES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf",
            "broadcast": "broadcast_perf", "reduce": "reduce_perf", "all_to_all": "alltoall_perf",
            "sendrecv": "sendrecv_perf"}
"""commbench's collective → nccl-tests' program (commbench perf takes either name)."""

# ---- steps: every make, nccl-tests and commbench run


class StepFailed(Exception):
    """A step that exited non-zero or ran past its timeout: main prints its one line and exits 1."""


def step(name: str, command: list[str], *, timeout_s: float, logs: Path, env: dict | None = None) -> str:
    """Run one step in its own process group (process_group.run_step), keep its output in logs/NAME.out and .err,
    and return its stdout; StepFailed with one line where it did not exit 0."""
    result = run_step(command, timeout_s=timeout_s, env=env, cwd=ROOT)
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{name}.out").write_text(result.stdout)
    (logs / f"{name}.err").write_text(result.stderr)
    print(f"  {result.seconds:6.1f} s  {name}: {'ok' if result.ok else result.why(timeout_s)}", flush=True)
    if not result.ok:
        raise StepFailed(f"FAILED step {name}: {result.why(timeout_s)}: {' '.join(command[:3])} ... "
                         f"(its output: {logs / name}.out and .err)")
    return result.stdout


# ---- building nccl-tests (CPU side or GPU side)


def source_dir(given: Path | None) -> Path | None:
    candidates = (given,) if given else SOURCES
    return next((path.absolute() for path in candidates if path and (path / "src" / "common.cu").exists()), None)


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
        found["why"] = "the nvidia-nccl wheel is not installed here (a CPU build of torch): give --nccl-home"
    return found


def nccl_home_for_make(wheel_home: Path, scratch: Path) -> Path:
    """nccl-tests links -lnccl: a folder whose lib/libnccl.so points at the wheel's libnccl.so.2 (the wheel has no
    unversioned name). Links are made anew: a folder carried from another machine holds links that dangle."""
    home = scratch / "nccl-home"
    (home / "lib").mkdir(parents=True, exist_ok=True)
    for name, target in (("include", wheel_home / "include"), ("lib/libnccl.so", wheel_home / "lib" / "libnccl.so.2")):
        link = home / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target.absolute())
    return home


def device_arch(arch: str | None) -> str:
    """--arch as given, else this GPU's compute capability (90 for an H100 or H200)."""
    if arch:
        return arch
    import torch

    return "".join(map(str, torch.cuda.get_device_capability(0)))


def gencode(arch: str) -> str:
    """One architecture: nccl-tests' default list compiles for six and takes minutes."""
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def cuda_home(given: str | None = None) -> str:
    """--cuda-home as given; else $CUDA_HOME, /usr/local/cuda, or the toolkit around the nvcc on PATH: the first with
    bin/nvcc and the runtime's headers (an nvcc on PATH may be a wrapper script outside the toolkit)."""
    if given:
        return str(Path(given).absolute())
    nvcc = shutil.which("nvcc")
    candidates = (os.environ.get("CUDA_HOME"), "/usr/local/cuda", nvcc and str(Path(nvcc).resolve().parent.parent))
    for candidate in filter(None, candidates):
        if (Path(candidate) / "bin" / "nvcc").exists() and (Path(candidate) / "include" / "cuda_runtime.h").exists():
            return candidate
    return "/usr/local/cuda"


def cuda_lib(home: str) -> str:
    """The folder with libcudart_static.a: a toolkit's lib64, or lib in pip's CUDA 13 wheels (nccl-tests' default
    CUDA_LIB is lib64 only)."""
    for name in ("lib64", "lib"):
        if (Path(home) / name / "libcudart_static.a").exists():
            return str(Path(home) / name)
    return str(Path(home) / "lib64")


def parallel_jobs() -> int:
    """What `nproc` says: the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def build_command(source: Path, build: Path, nccl_home: str, cuda: str, code: str, programs) -> list[str]:
    """make in nccl-tests' src/, every path absolute: make -C changes into src/, where a relative BUILDDIR would
    land elsewhere and a relative NCCL_HOME would not be found."""
    build = build.absolute()
    return ["make", "-C", str(source.absolute() / "src"), f"-j{parallel_jobs()}", f"NCCL_HOME={nccl_home}",
            f"CUDA_HOME={cuda}", f"CUDA_LIB={cuda_lib(cuda)}", "CUDARTLIB=cudart_static", f"BUILDDIR={build}",
            f"NVCC_GENCODE={code}", "os.build", *[str(build / program) for program in programs]]


BUILT = "built.json"
"""In --binaries: each program's architecture, so that a folder built for another GPU is built again, not run."""


def built_archs(binaries: Path) -> dict[str, str]:
    try:
        return json.loads((binaries / BUILT).read_text())
    except (OSError, ValueError):
        return {}


def missing_programs(binaries: Path, collectives, arch: str | None) -> list[str]:
    """The programs to build: not in `binaries`, or built for another architecture than `arch` (None: any)."""
    archs = built_archs(binaries)
    return [BINARIES[name] for name in collectives if not os.access(binaries / BINARIES[name], os.X_OK) or
            (arch is not None and archs.get(BINARIES[name]) != arch)]


def build_missing(source: Path | None, binaries: Path, scratch: Path, nccl_home: Path, cuda: str, arch: str,
                  collectives, timeout_s: float) -> list[str]:
    """Build the programs missing from `binaries` in scratch/build and copy them into `binaries` (only the programs
    travel: the objects stay in scratch); the make command, or [] where none was missing."""
    missing = missing_programs(binaries, collectives, arch)
    if not missing:
        print(f"# nccl-tests: prebuilt {', '.join(BINARIES[name] for name in collectives)} (sm_{arch}) in "
              f"{binaries}", flush=True)
        return []
    if source is None:
        raise StepFailed(f"FAILED step build: {', '.join(missing)} missing from {binaries} and no nccl-tests source "
                         f"at {' or '.join(map(str, SOURCES))} (--source)")
    make = build_command(source, scratch / "build", str(nccl_home_for_make(nccl_home, scratch)), cuda, gencode(arch),
                         missing)
    print("# build:", " ".join(make), flush=True)
    step("build", make, timeout_s=timeout_s, logs=scratch / "steps")
    binaries.mkdir(parents=True, exist_ok=True)
    for program in missing:
        shutil.copy2(scratch / "build" / program, binaries / program)
    strip_debug([binaries / program for program in missing], timeout_s=timeout_s, logs=scratch / "steps")
    (binaries / BUILT).write_text(json.dumps({**built_archs(binaries), **dict.fromkeys(missing, arch)}, indent=1))
    total = sum(path.stat().st_size for path in binaries.iterdir() if path.is_file())
    print(f"# {binaries}: {total / 2**20:.1f} MiB" + ("" if total < CARRY_LIMIT_BYTES else
          f" (over the {CARRY_LIMIT_BYTES >> 20} MiB a carried path may hold)"), flush=True)
    return make


def strip_debug(programs: list[Path], *, timeout_s: float, logs: Path) -> None:
    """Drop the host's debug sections (nccl-tests compiles with -g): about a quarter of each program, so that the
    seven travel well under CARRY_LIMIT_BYTES. The device code (.nv_fatbin) stays. Skipped where there is no strip."""
    if shutil.which("strip") is None:
        print("# no strip here: the programs keep their debug sections", flush=True)
        return
    step("strip", ["strip", "--strip-debug", *map(str, programs)], timeout_s=timeout_s, logs=logs)
