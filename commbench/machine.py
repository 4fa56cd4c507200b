"""The machine a bench will run on, as one value resolved once and passed down: how many GPUs, whether NCCL is there,
and whether commbench already runs as a rank of a job (torchrun or srun) of how many ranks.

`Machine.here()` reads this machine (torch and the environment, once); `Machine.for_job()` states the compute nodes
of a Slurm job, so a login node without GPUs can validate a GPU suite. Options resolve against a Machine
(`resolve_target`), never against global state.
"""

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import NotRequired, Protocol, TypedDict

from commbench import gpu_mapping, srun_ranks
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.gpu_mapping import Launcher
from commbench.names import AUTO, CPU, CUDA, GLOO, NCCL, Backend, BackendChoice, Device, DeviceChoice

DEFAULT_CPU_RANKS = 2
"""Ranks of a CPU run when --nproc is not given: the smallest world in which bytes cross between ranks."""
MAX_RANKS_PER_CORE = 8
"""The most ranks per CPU core even with --oversubscribe. Each rank is a Python process with torch loaded (about
0.3 GiB resident) that spins in its collectives; past a few per core a run measures the scheduler, and --nproc 10000
on a laptop would exhaust its memory before the first rank connected. 8 still lets a 1-core CI machine run the
4- and 5-rank tests."""
CPUS_PER_LOCAL_RANK = 2
"""The CPUs a rank of a job needs on its node for its times to measure the collective: its main thread spins in the
calls, and its backend has threads of its own (NCCL's proxy, the watchdog, gloo's I/O), besides the launcher's
agent. With fewer, they take turns on the cores and the times measure the scheduler. Slurm grants one CPU per task
unless asked for more (commbench slurm submit asks for 2 per rank + 1, docs/slurm.md)."""


class StartedTorchrun(Protocol):
    """A started torchrun as the launcher watches it (execution/launch.py): subprocess.Popen's pid, returncode,
    poll() and wait(), which torch_host.HostedTorchrun has too."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class TorchrunStarter(Protocol):
    """What starts torchrun for a launch where torch is loaded already (execution/torch_host.TorchHost)."""

    def launch(self, args: list[str], *, log_path: str, env: dict[str, str] | None,
               preload: tuple[str, ...] = ()) -> StartedTorchrun: ...


class MachineFacts(TypedDict):
    """What torch says of a machine (Machine.facts_here), as JSON values: the torch host sends it over a pipe."""

    gpus: int
    nccl_available: bool
    nccl_version: list[int] | None
    gpu_capability: NotRequired[list[int] | None]  # NotRequired: facts stated without them read as unknown
    gpu_memory_bytes: NotRequired[int | None]


class JobCpuShare(TypedDict):
    """meta.json's job_cpus: the CPUs a job's ranks got on rank 0's node (job_cpu_share)."""

    usable_cpus: int
    local_ranks: int
    cpus_per_rank_wanted: int
    shortfall: str | None


def inside_job(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process (or this environment) is a rank of a job torchrun or srun started (RANK and WORLD_SIZE
    set): commbench then runs in place instead of launching, and only rank 0 prints."""
    environ = os.environ if environ is None else environ
    return "RANK" in environ and "WORLD_SIZE" in environ


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
    launcher: Launcher | None = None
    """How the job's ranks were started, when this process is one: gpu_mapping.TORCHRUN, SRUN or OTHER_JOB."""
    step_gpus: int | None = None
    """For an srun task: the GPUs the Slurm step holds on this node (gpu_mapping.slurm_step_gpus), else None."""
    launch_refused: str | None = None
    """Why commbench must not launch ranks here although it is no rank yet (an srun step of several tasks that cannot
    each be a rank, srun_ranks.derive); resolve_target says it, before any folder is made."""
    visible_gpu_ids: tuple[str, ...] | None = None
    """CUDA_VISIBLE_DEVICES' entries (indices, GPU-… or MIG-… ids), None when it is not set; said in refusals."""
    gpu_memory_bytes: int | None = None
    """Memory of the smallest CUDA device here (a GPU, or a MIG instance where a GPU is split), from NVML; None when
    unknown. The memory plan (commbench/sweep/memory_plan.py) checks a sweep's largest point against it."""
    host_memory_bytes: int | None = None
    """Memory this machine's processes may still take (MemAvailable, or a smaller cgroup limit's room), read when
    the machine is read; None for machines stated for other nodes (Machine.for_job) or where it is not known."""

    stated: bool = False
    """True for compute nodes stated by Machine.for_job, not read here: what is unknown of them (memory, cores) is
    read by each rank when the job starts, which resolves its options again on the node itself."""

    torch_host: TorchrunStarter | None = field(default=None, compare=False, repr=False)
    """The launching command's torch host, where it started one: launches fork torchrun there instead of starting a
    second interpreter that imports torch again (execution/torch_host.py)."""

    @property
    def in_job(self) -> bool:
        return self.world_size is not None

    def gpu_index(self, backend: Backend) -> int:
        """The device index this rank uses among the CUDA devices it sees (gpu_mapping.gpu_index, the same rule the
        launcher checks with)."""
        return gpu_mapping.gpu_index(local_rank=self.local_rank, local_ranks=self.local_world_size, visible=self.gpus,
                                     backend=backend, step_gpus=self.step_gpus, launcher=self.launcher,
                                     visible_ids=self.visible_gpu_ids)

    @classmethod
    def here(cls, environ: dict[str, str] | None = None) -> "Machine":
        """This machine and this process (reads torch, so call it only where torch is needed anyway; a launching
        process asks torch_host.machine())."""
        return cls.here_from(cls.facts_here(), environ)

    @staticmethod
    def facts_here() -> MachineFacts:
        """What torch says of this machine, as JSON values: GPUs it sees, NCCL and its version."""
        import torch
        import torch.distributed as dist

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        nccl = bool(dist.is_available() and dist.is_nccl_available())
        version: list[int] | None = None
        capability: list[int] | None = None
        memory: int | None = None
        if gpus and nccl:
            found = torch.cuda.nccl.version()
            version = list(found) if isinstance(found, tuple) else None
        if gpus:
            from commbench.nvml import lowest_capability

            found_capability = lowest_capability()
            capability = list(found_capability) if found_capability else None
            memory = smallest_gpu_memory()
        return {"gpus": gpus, "nccl_available": nccl, "nccl_version": version, "gpu_capability": capability,
                "gpu_memory_bytes": memory}

    @classmethod
    def here_from(cls, facts: MachineFacts, environ: Mapping[str, str] | None = None, *,
                  torch_host: TorchrunStarter | None = None) -> "Machine":
        """This machine from facts_here() (read in this process or another) and this process's environment."""
        environ = os.environ if environ is None else environ
        version = tuple(facts["nccl_version"]) if facts["nccl_version"] else None
        in_job = inside_job(environ)
        found_capability = facts.get("gpu_capability")
        capability = tuple(found_capability) if found_capability else None
        return cls(gpus=facts["gpus"], nccl_available=facts["nccl_available"], nccl_version=version,
                   gpu_capability=capability,
                   rank=int(environ["RANK"]) if in_job else None,
                   world_size=int(environ["WORLD_SIZE"]) if in_job else None,
                   local_rank=int(environ.get("LOCAL_RANK") or environ.get("SLURM_LOCALID") or 0),
                   local_world_size=_local_world_size(environ) if in_job else None, cpus=usable_cpus(),
                   launcher=gpu_mapping.launcher_of(environ), step_gpus=gpu_mapping.slurm_step_gpus(environ),
                   visible_gpu_ids=gpu_mapping.visible_device_ids(environ),
                   launch_refused=None if in_job else srun_ranks.refusal(environ),
                   gpu_memory_bytes=facts.get("gpu_memory_bytes"), host_memory_bytes=available_host_memory(),
                   torch_host=torch_host)

    @classmethod
    def for_job(cls, *, nodes: int, ranks_per_node: int, gpus_per_node: int) -> "Machine":
        """The compute nodes of a job: each rank resolves its options in place, as rank 0 of nodes × ranks_per_node,
        on a node with gpus_per_node GPUs (a GPU node is assumed to have NCCL)."""
        return cls(gpus=gpus_per_node, nccl_available=gpus_per_node > 0, rank=0, world_size=nodes * ranks_per_node,
                   local_world_size=ranks_per_node, launcher=gpu_mapping.TORCHRUN,  # the job script runs torchrun
                   stated=True)


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset narrows), not the host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def available_host_memory() -> int | None:
    """Bytes this machine's processes may still take: MemAvailable, or less where this process's cgroup (a container,
    a Slurm job) has less room under its limit; None when neither can be read (not Linux)."""
    available = proc_kib_field("/proc/meminfo", "MemAvailable:")
    found = ([] if available is None else [available]) + _cgroup_room()
    return min(found) if found else None


def proc_kib_field(path: str, field: str) -> int | None:
    """A kB field of a /proc file (/proc/meminfo, /proc/self/status) in bytes; None where it cannot be read (not
    Linux)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> list[int]:
    """Room under the memory limit of this process's cgroup and of each cgroup above it: cgroup v2 (memory.max minus
    memory.current) and v1 (memory.limit_in_bytes minus memory.usage_in_bytes), the usage less its inactive file
    cache, which the kernel reclaims before it fails an allocation (as `docker stats` counts it); a cgroup without a
    limit gives no figure."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    rooms: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":  # v2, the unified hierarchy
            rooms += _rooms_under(Path("/sys/fs/cgroup"), path, ("memory.max", "memory.current", "inactive_file"))
        elif "memory" in controllers.split(","):
            rooms += _rooms_under(Path("/sys/fs/cgroup/memory"), path,
                                  ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    return rooms


_NO_LIMIT = 2**62
"""cgroup v1 writes "no limit" as its largest page-aligned counter (9223372036854771712): a limit past this is none."""


def _rooms_under(root: Path, path: str, names: tuple[str, str, str]) -> list[int]:
    """names: the limit file, the usage file and the memory.stat key of the reclaimable file cache."""
    limit_name, usage_name, cache_key = names
    own = root / path.strip().lstrip("/")
    rooms: list[int] = []
    for folder in (own, *[parent for parent in own.parents if parent.is_relative_to(root)]):
        try:
            limit, used = (folder / limit_name).read_text().strip(), int((folder / usage_name).read_text())
            if not limit.isdigit() or int(limit) >= _NO_LIMIT:  # v2 writes "max" for no limit
                continue
            stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines() if " " in line)
            rooms.append(max(0, int(limit) - used + int(stat.get(cache_key, 0))))
        except (OSError, ValueError):  # no memory controller there (a container sees its own cgroup as the root)
            pass
    return rooms


def smallest_gpu_memory() -> int | None:
    """The memory of the smallest CUDA device here, from NVML: a GPU's, or, on a GPU split by MIG, its smallest
    instance's. NVML makes no CUDA context (the torch host reads this before it forks launchers); None without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVML library or driver: unknown
        return None
    try:
        sizes: list[int] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            instances = _mig_instances(pynvml, handle)
            sizes += [int(pynvml.nvmlDeviceGetMemoryInfo(device).total) for device in instances or [handle]]
        return min(sizes) if sizes else None
    except Exception:  # an NVML call this driver lacks: unknown rather than wrong
        return None
    finally:
        pynvml.nvmlShutdown()


def _mig_instances(pynvml: ModuleType, handle: object) -> list[object]:
    """The MIG devices of a GPU in MIG mode (each a CUDA device of its own), [] when MIG is off or unsupported."""
    try:
        current, _ = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # a GPU without MIG
        return []
    if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return []
    instances: list[object] = []
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            instances.append(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
        except Exception:  # an empty slot
            continue
    return instances


def cpu_shortfall(cpus: int | None, local_ranks: int | None) -> str | None:
    """The warning for a job's ranks that have fewer than CPUS_PER_LOCAL_RANK usable CPUs each on their node (cpus:
    this rank's affinity mask, which the ranks of a node share unless their launcher binds each); None when there
    are enough, or either number is unknown."""
    if cpus is None or not local_ranks or cpus >= CPUS_PER_LOCAL_RANK * local_ranks:
        return None
    return (f"{cpus} usable CPU(s) for the {local_ranks} rank(s) of this job on this node, fewer than "
            f"{CPUS_PER_LOCAL_RANK} per rank: ranks, backend threads and launcher take turns on the cores, so the "
            f"times measure the scheduler too; give the node's ranks {CPUS_PER_LOCAL_RANK * local_ranks} or more "
            "CPUs (Slurm --cpus-per-task or --exclusive, a wider taskset or container CPU limit) or start fewer ranks "
            "per node")


def job_cpu_share(environ: Mapping[str, str], cpus: int | None) -> JobCpuShare | None:
    """For meta.json, inside a job (torchrun, srun, a k8s pod's torchrun): this node's usable CPUs, the job's ranks
    on it and, when they are too few, the warning; None outside a job, or where the ranks on the node are unknown."""
    if not inside_job(environ):
        return None
    local_ranks = _local_world_size(environ)
    if cpus is None or local_ranks is None:
        return None
    return {"usable_cpus": cpus, "local_ranks": local_ranks, "cpus_per_rank_wanted": CPUS_PER_LOCAL_RANK,
            "shortfall": cpu_shortfall(cpus, local_ranks)}


def _local_world_size(environ: Mapping[str, str]) -> int | None:
    """Ranks of the job on this machine: torchrun's LOCAL_WORLD_SIZE, else the Slurm step's tasks on this node."""
    value = environ.get("LOCAL_WORLD_SIZE", "")
    if value.isdigit():
        return int(value)
    return gpu_mapping.slurm_tasks_on_node(environ)


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a bench runs: the resolved backend, device type and number of ranks."""

    backend: Backend
    device: Device
    nproc: int
    cores: tuple[int, ...] | None = None
    """With --bind-cores: the core each local rank is pinned to, by local rank."""


def resolve_target(machine: Machine, *, backend: BackendChoice = AUTO, device: DeviceChoice = AUTO,
                   nproc: int | None = None, oversubscribe: bool = False, bind_cores: bool = False) -> Target:
    """Turn `auto` choices into concrete ones for this machine and refuse impossible combinations before anything
    launches. Inside a job the rank count is the job's, and the ranks on one machine share its GPUs. Ranks that
    commbench launches here must fit its cores (more with oversubscribe, up to MAX_RANKS_PER_CORE each, and a
    CommbenchWarning then says that they share cores)."""
    device_type = _resolve_device(machine, backend=backend, device=device)
    backend_name = _resolve_backend(machine, backend=backend, device=device_type)
    ranks_here: int | None
    if machine.world_size is not None:  # in a job: its ranks are the ones there are
        nproc, ranks_here = _job_ranks(machine, machine.world_size, nproc=nproc)
    else:
        nproc = ranks_here = _launched_ranks(machine, device=device_type, nproc=nproc, oversubscribe=oversubscribe)
    if nproc < 1:
        raise CommbenchError(f"--nproc {nproc} is not a rank count; use 1 or more")
    if device_type == CUDA:
        _check_gpu_per_rank(machine, backend=backend_name, ranks_here=ranks_here)
    cores = _cores_to_bind(machine, device=device_type, nproc=nproc) if bind_cores else None
    return Target(backend=backend_name, device=device_type, nproc=nproc, cores=cores)


def _resolve_device(machine: Machine, *, backend: BackendChoice, device: DeviceChoice) -> Device:
    """--device auto: CUDA where there are GPUs, unless gloo is asked for by name (gloo on CUDA tensors must be asked
    for with --device cuda); CUDA asked for without a GPU is refused."""
    if device == AUTO:
        return CUDA if machine.gpus and backend != GLOO else CPU
    if device == CUDA and not machine.gpus:
        raise CommbenchError("--device cuda asked for, but no CUDA GPU is visible; use --device cpu (gloo)")
    return device


def _resolve_backend(machine: Machine, *, backend: BackendChoice, device: Device) -> Backend:
    """--backend auto: NCCL on CUDA tensors, gloo on CPU ones; NCCL, chosen or asked for, needs both CUDA tensors
    and a torch built with it."""
    chosen: Backend = (NCCL if device == CUDA else GLOO) if backend == AUTO else backend
    if chosen == NCCL:
        if device != CUDA:
            raise CommbenchError("NCCL runs on CUDA tensors only; use --backend gloo with --device cpu")
        if not machine.nccl_available:
            raise CommbenchError("this torch build has no NCCL; use --backend gloo")
    return chosen


def _job_ranks(machine: Machine, world_size: int, *, nproc: int | None) -> tuple[int, int | None]:
    """(ranks, ranks on this machine) inside a job: the job's own, which --nproc may only repeat. Too few CPUs for
    them is said as a warning: the launcher placed the ranks, and the run goes on (meta.json records it too)."""
    if nproc is not None and nproc != world_size:
        raise CommbenchError(f"--nproc {nproc} conflicts with WORLD_SIZE={world_size} of the job "
                             "commbench runs in; drop --nproc inside torchrun/srun")
    shortfall = cpu_shortfall(machine.cpus, machine.local_world_size)
    if shortfall:
        warnings.warn(shortfall, CommbenchWarning, stacklevel=3)  # at resolve_target's caller
    return world_size, machine.local_world_size


def _launched_ranks(machine: Machine, *, device: Device, nproc: int | None, oversubscribe: bool) -> int:
    """The ranks commbench launches here: --nproc, else one per GPU (CUDA) or DEFAULT_CPU_RANKS (CPU); they must fit
    this machine's cores (_check_cores)."""
    if machine.launch_refused:
        raise CommbenchError(machine.launch_refused)
    chosen = nproc is not None
    count = (machine.gpus if device == CUDA else DEFAULT_CPU_RANKS) if nproc is None else nproc
    if count < 1:
        raise CommbenchError(f"--nproc {count} is not a rank count; use 1 or more")
    if machine.cpus is not None and (chosen or device == CPU):
        # the default 2 CPU ranks run even on a 1-core machine (bytes must cross between ranks), with the warning
        _check_cores(count, machine.cpus, oversubscribe=oversubscribe or not chosen)
    return count


def _check_gpu_per_rank(machine: Machine, *, backend: Backend, ranks_here: int | None) -> None:
    """The rule each rank picks its GPU by (gpu_mapping.gpu_index), here for every local rank at once (they differ
    only in local rank): refuses ranks that cannot each have a GPU where the backend needs one."""
    gpu_mapping.gpu_index(local_rank=0, local_ranks=ranks_here, visible=machine.gpus, backend=backend,
                          step_gpus=machine.step_gpus if machine.in_job else None,
                          launcher=machine.launcher if machine.in_job else None,
                          visible_ids=machine.visible_gpu_ids)


def _cores_to_bind(machine: Machine, *, device: Device, nproc: int) -> tuple[int, ...]:
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
    """Refuse more ranks than this machine's cores can run; warn where oversubscribed ranks share cores (the warning
    points at resolve_target's caller, through _launched_ranks)."""
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
                      "oversubscribed alike", CommbenchWarning, stacklevel=4)
