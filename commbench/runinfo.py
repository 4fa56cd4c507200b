"""What a run records about itself and its machines: versions, commit, devices, hosts and relevant env vars.

launch_meta runs in the launching process, which does not import torch (the ranks do): torch is imported only by the
functions that ranks and `commbench env` call."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import commbench
from commbench import nvml
from commbench.machine import job_cpu_share, usable_cpus
from commbench.names import BACKENDS, NCCL
from commbench.store import SCHEMA_VERSION, STATUS_RUNNING

if TYPE_CHECKING:
    import torch

_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
_ENV_NAMES = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_commit() -> str | None:
    """The commit of the commbench checkout that runs (with -dirty for local edits); None outside a checkout."""
    source = Path(commbench.__file__).resolve().parent.parent
    if not (source / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if dirty else commit


def backend_version(backend: str) -> str:
    import torch

    if backend == NCCL and torch.cuda.is_available():
        version = torch.cuda.nccl.version()
        return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return f"bundled with torch {torch.__version__}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def relevant_env() -> dict[str, str]:
    return {name: value for name, value in sorted(os.environ.items())
            if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES}


def launch_meta(argv: list[str], run_id: str) -> dict[str, object]:
    """What the launching process knows before any rank starts (in place, rank 0 of the job is that process)."""
    cpu_share = job_cpu_share(os.environ, usable_cpus())
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "status": STATUS_RUNNING,
        "reason": None,
        "command_line": shlex.join(argv),
        "start_time": utc_now(),
        "end_time": None,
        "commbench_version": commbench.__version__,
        "git_commit": git_commit(),
        "torch_version": installed_torch_version(),  # the ranks' torch.__version__ replaces it (job_meta)
        "python_version": platform.python_version(),
        "launcher_host": platform.node(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),  # set when the run is (part of) a Slurm job
        # ranks of a job that another launcher placed (srun, torchrun, a pod): the CPUs they got on rank 0's node,
        # and the warning when they are fewer than 2 per rank (commbench's own launches check cores up front)
        **({"job_cpus": cpu_share} if cpu_share else {}),
    }


class RankFacts(TypedDict):
    """What one rank knows of itself (rank_facts); rank 0 gathers these from every rank."""

    host: str
    device: str
    cores: list[int] | None
    pid: int
    device_index: int
    bus: str


class RankDevice(Protocol):
    """What rank_facts asks of a rank's platform (commbench/platform.py, which takes cpu_model from here)."""

    def device_name(self) -> str: ...
    def device_slot(self) -> tuple[int, str]: ...


def rank_facts(device_platform: RankDevice) -> RankFacts:
    """What one rank knows of itself; rank 0 gathers these from every rank."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    index, bus = device_platform.device_slot()
    return {"host": platform.node(), "device": device_platform.device_name(), "cores": cores, "pid": os.getpid(),
            "device_index": index, "bus": bus}


def installed_torch_version() -> str | None:
    """torch's version without importing torch (the launcher's view): the loaded module's when there is one, else
    the installed distribution's."""
    if "torch" in sys.modules:
        return sys.modules["torch"].__version__
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def job_meta(*, backend: str, world: int, device: torch.device, facts: list[RankFacts]) -> dict[str, object]:
    """What rank 0 records once the process group is up."""
    import torch

    inventory = nvml.gpu_inventory()
    return {
        "torch_version": torch.__version__,
        "backend": backend,
        "backend_version": backend_version(backend),
        "cuda_version": torch.version.cuda,
        "device_type": device.type,
        "world_size": world,
        "hosts": sorted({fact["host"] for fact in facts}),
        "device_names": [fact["device"] for fact in facts],
        "rank_cores": [fact.get("cores") for fact in facts],  # each rank's CPU affinity (--bind-cores: one core)
        # by rank: host, pid, device index and bus (nccl-tests' "#  Rank N ... on HOST device D [BUS] NAME" lines)
        "ranks": [{"rank": rank, **{key: fact.get(key) for key in ("host", "pid", "device_index", "bus", "device",
                                                                    "cores")}}
                  for rank, fact in enumerate(facts)],
        "driver_version": inventory.get("driver_version"),
        "env": relevant_env(),
    }


def environment_report() -> dict[str, Any]:
    """What a sweep on this machine would use (`commbench env`): a JSON document (Any: `commbench env` prints its
    nested values and adds its own)."""
    import torch
    import torch.distributed as dist

    from commbench.machine import Machine, resolve_target

    machine = Machine.here()
    default = resolve_target(Machine(gpus=machine.gpus, nccl_available=machine.nccl_available))  # a new sweep's
    backends = {name: getattr(dist, f"is_{name}_available", lambda: False)() for name in (*BACKENDS, "mpi", "ucc")}
    return {
        "commbench_version": commbench.__version__,
        "python_version": platform.python_version(),
        "python": sys.executable,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "backends": {name: (backend_version(name) if available else None) for name, available in backends.items()},
        "cuda_gpus": machine.gpus,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "nvml": nvml.gpu_inventory(),
        "default": {"backend": default.backend, "device": default.device, "nproc": default.nproc},
        "env": relevant_env(),
    }
