"""The machine a bench will run on, as one value resolved once and passed down: how many GPUs, whether NCCL is there,
and whether commbench already runs as a rank of a job (torchrun or srun) of how many ranks.

`Machine.here()` reads this machine (torch and the environment, once); `Machine.for_job()` states the compute nodes
of a Slurm job, so a login node without GPUs can validate a GPU suite. Options resolve against a Machine
(`resolve_target`), never against global state.
"""

import os
import warnings
from dataclasses import dataclass

from commbench.errors import CommbenchError, CommbenchWarning
from commbench.names import AUTO, CPU, CUDA, GLOO, NCCL

DEFAULT_CPU_RANKS = 2
"""Ranks of a CPU run when --nproc is not given: the smallest world in which bytes cross between ranks."""
MAX_RANKS_PER_CORE = 8
"""The most ranks per CPU core even with --oversubscribe. Each rank is a Python process with torch loaded (about
0.3 GiB resident) that spins in its collectives; past a few per core a run measures the scheduler, and --nproc 10000
on a laptop would exhaust its memory before the first rank connected. 8 still lets a 1-core CI machine run the
4- and 5-rank tests."""


@dataclass(frozen=True, kw_only=True)
class Machine:
    gpus: int
    """CUDA GPUs one rank's machine has (visible to torch)."""
    nccl_available: bool
    nccl_version: tuple[int, ...] | None = None
    """None when unknown (no CUDA here, or the facts are assumed for other machines)."""
    rank: int | None = None
    """This process's RANK when it already is a rank of a job (torchrun, srun), else None."""
    world_size: int | None = None
    """WORLD_SIZE of that job: the rank count is fixed by it."""
    local_rank: int = 0
    local_world_size: int | None = None
    """Ranks of the job on this machine, which share its GPUs."""
    cpus: int | None = None
    """CPU cores this process may run on; None when not known (a machine stated for other nodes): no core limit."""
    gpu_capability: tuple[int, ...] | None = None
    """The lowest CUDA compute capability of its GPUs (NVML's), None when unknown: fp8 collectives need 9.0."""

    @property
    def in_job(self) -> bool:
        return self.world_size is not None

    @classmethod
    def here(cls, environ: dict[str, str] | None = None) -> "Machine":
        """This machine and this process (reads torch, so call it only where torch is needed anyway; a launching
        process asks torch_host.machine())."""
        return cls.here_from(cls.facts_here(), environ)

    @staticmethod
    def facts_here() -> dict:
        """What torch says of this machine, as JSON values: GPUs it sees, NCCL and its version."""
        import torch
        import torch.distributed as dist

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        nccl = bool(dist.is_available() and dist.is_nccl_available())
        version = capability = None
        if gpus and nccl:
            found = torch.cuda.nccl.version()
            version = list(found) if isinstance(found, tuple) else None
        if gpus:
            from commbench.nvml import lowest_capability

            found_capability = lowest_capability()
            capability = list(found_capability) if found_capability else None
        return {"gpus": gpus, "nccl_available": nccl, "nccl_version": version, "gpu_capability": capability}

    @classmethod
    def here_from(cls, facts: dict, environ: dict[str, str] | None = None) -> "Machine":
        """This machine from facts_here() (read in this process or another) and this process's environment."""
        environ = os.environ if environ is None else environ
        version = tuple(facts["nccl_version"]) if facts["nccl_version"] else None
        in_job = "RANK" in environ and "WORLD_SIZE" in environ
        capability = tuple(facts["gpu_capability"]) if facts.get("gpu_capability") else None
        return cls(gpus=facts["gpus"], nccl_available=facts["nccl_available"], nccl_version=version,
                   gpu_capability=capability,
                   rank=int(environ["RANK"]) if in_job else None,
                   world_size=int(environ["WORLD_SIZE"]) if in_job else None,
                   local_rank=int(environ.get("LOCAL_RANK") or environ.get("SLURM_LOCALID") or 0),
                   local_world_size=_local_world_size(environ) if in_job else None, cpus=usable_cpus())

    @classmethod
    def for_job(cls, *, nodes: int, ranks_per_node: int, gpus_per_node: int) -> "Machine":
        """The compute nodes of a job: each rank resolves its options in place, as rank 0 of nodes × ranks_per_node,
        on a node with gpus_per_node GPUs (a GPU node is assumed to have NCCL)."""
        return cls(gpus=gpus_per_node, nccl_available=gpus_per_node > 0, rank=0, world_size=nodes * ranks_per_node,
                   local_world_size=ranks_per_node)


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset narrows), not the host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _local_world_size(environ) -> int | None:
    value = environ.get("LOCAL_WORLD_SIZE") or environ.get("SLURM_NTASKS_PER_NODE")
    return int(value) if value and value.isdigit() else None


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a bench runs: the resolved backend, device type and number of ranks."""

    backend: str
    device: str
    nproc: int
    cores: tuple[int, ...] | None = None
    """With --bind-cores: the core each local rank is pinned to, by local rank."""


def resolve_target(machine: Machine, *, backend: str = AUTO, device: str = AUTO, nproc: int | None = None,
                   oversubscribe: bool = False, bind_cores: bool = False) -> Target:
    """Turn `auto` choices into concrete ones for this machine and refuse impossible combinations before anything
    launches. Inside a job the rank count is the job's, and the ranks on one machine share its GPUs. Ranks that
    commbench launches here must fit its cores (more with oversubscribe, up to MAX_RANKS_PER_CORE each, and a
    CommbenchWarning then says that they share cores)."""
    gpus = machine.gpus
    if device == AUTO:
        # gloo asked for by name means CPU tensors; gloo on CUDA tensors must be asked for with --device cuda
        device = CUDA if gpus and backend != GLOO else CPU
    if device == CUDA and not gpus:
        raise CommbenchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu (gloo)")
    if backend == AUTO:
        backend = NCCL if device == CUDA else GLOO
    if backend == NCCL:
        if device != CUDA:
            raise CommbenchError("NCCL runs on CUDA tensors only; use --backend gloo with --device cpu")
        if not machine.nccl_available:
            raise CommbenchError("this torch build has no NCCL; use --backend gloo")
    if machine.in_job:
        if nproc is not None and nproc != machine.world_size:
            raise CommbenchError(f"--nproc {nproc} conflicts with WORLD_SIZE={machine.world_size} of the job "
                                 "commbench runs in; drop --nproc inside torchrun/srun")
        nproc, ranks_here = machine.world_size, machine.local_world_size
    else:
        chosen = nproc is not None
        nproc = (gpus if device == CUDA else DEFAULT_CPU_RANKS) if nproc is None else nproc
        ranks_here = nproc
        if nproc < 1:
            raise CommbenchError(f"--nproc {nproc} is not a rank count; use 1 or more")
        if machine.cpus is not None and (chosen or device == CPU):
            # the default 2 CPU ranks run even on a 1-core machine (bytes must cross between ranks), with the warning
            _check_cores(nproc, machine.cpus, oversubscribe=oversubscribe or not chosen)
    if nproc < 1:
        raise CommbenchError(f"--nproc {nproc} is not a rank count; use 1 or more")
    if backend == NCCL and ranks_here is not None and ranks_here > gpus:
        raise CommbenchError(f"{ranks_here} ranks on this machine exceed its {gpus} visible GPU(s): NCCL needs one GPU "
                             f"per rank; use --nproc {gpus} or fewer (or fewer ranks per node), or --backend gloo")
    cores = _cores_to_bind(machine, device=device, nproc=nproc) if bind_cores else None
    return Target(backend=backend, device=device, nproc=nproc, cores=cores)


def _cores_to_bind(machine: Machine, *, device: str, nproc: int) -> tuple[int, ...]:
    """A core of its own for each rank commbench launches on this machine, from the cores this process may use."""
    if machine.in_job:
        raise CommbenchError("--bind-cores pins ranks that commbench launches; inside torchrun or srun, bind with "
                             "your launcher (srun --cpu-bind=cores, numactl) and drop --bind-cores")
    if device != CPU:
        raise CommbenchError("--bind-cores pins CPU ranks; GPU ranks are bound to their GPU's cores by the launcher "
                             "(srun --cpu-bind, numactl): drop --bind-cores or use --device cpu")
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if nproc > len(usable):
        raise CommbenchError(f"--bind-cores needs a core per rank: {nproc} ranks, {len(usable) or 'no'} usable "
                             f"core(s) here; use --nproc {len(usable)} or fewer, or drop --bind-cores")
    return tuple(usable[:nproc])


def _check_cores(nproc: int, cpus: int, *, oversubscribe: bool) -> None:
    ceiling = MAX_RANKS_PER_CORE * cpus
    if nproc > ceiling:
        raise CommbenchError(f"--nproc {nproc} is more ranks than this machine can run: at most {ceiling} on its "
                             f"{cpus} CPU core(s) ({MAX_RANKS_PER_CORE} per core, with --oversubscribe); use --nproc "
                             f"{min(cpus, ceiling)} or fewer, or run on more machines (commbench slurm submit)")
    if nproc > cpus and not oversubscribe:
        raise CommbenchError(f"--nproc {nproc} exceeds this machine's {cpus} CPU core(s): the ranks would take turns "
                             f"on the cores and the times would measure that; use --nproc {cpus} or fewer, or add "
                             f"--oversubscribe to run them anyway (at most {ceiling} here)")
    if nproc > cpus:
        warnings.warn(f"{nproc} ranks share this machine's {cpus} CPU core(s): a rank waits for a core as well as "
                      "for its peers, so the times measure the OS scheduler too; compare them only with runs "
                      "oversubscribed alike", CommbenchWarning, stacklevel=3)
