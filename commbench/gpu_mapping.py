"""Which GPU a rank uses, decided from what its own process sees, by one function for the launcher's check and for
the rank's choice of device.

A rank knows its local rank, how many ranks of the job run on its node, how many CUDA devices it sees (torch's count,
after CUDA_VISIBLE_DEVICES, whose entries may be indices, GPU-… UUIDs or MIG-… ids) and, when srun started it as a
task, how many GPUs the Slurm step holds on the node. Two ways of starting ranks put them on GPUs differently:

- **every rank sees the node's GPUs** (torchrun, commbench's own launch, srun without GPU binding): local rank i
  uses visible device i. NCCL needs a GPU of its own per rank, so more ranks on the node than visible devices is
  refused; gloo on CUDA tensors may share, rank i on device i mod the count.
- **Slurm binds GPUs per task** (srun --gpus-per-task=N, which implies --gpu-bind=per_task:N, or --gpu-bind=single:1,
  map_gpu, mask_gpu): each task sees fewer devices than the step holds on the node, and they are its own. It uses
  device local rank mod its count: the only one with one GPU per task; a different one per task when tasks are
  bound in blocks to a NUMA domain's GPUs (--gpu-bind=closest). More ranks on the node than GPUs in the step
  would put two ranks on one GPU whatever the binding: refused for NCCL.

The step's GPUs come from SLURM_GPUS_ON_NODE, the one variable that counts the step's whole allocation on the node in
every task, bound or not (step_gpus_on_node says why the others do not). A task where Slurm set neither it nor
SLURM_STEP_GPUS got its GPUs from no Slurm binding, so it is taken to see what every task of the node sees.
"""

from collections.abc import Mapping
from typing import Final, Literal

from commbench.errors import CommbenchError
from commbench.names import NCCL, Backend

Launcher = Literal["torchrun", "srun", "job"]
"""How the ranks of a job were started (Machine.launcher): by torchrun (LOCAL_RANK set), as srun tasks running
commbench in place (SLURM_LOCALID without LOCAL_RANK), or by another launcher that set RANK and WORLD_SIZE."""
TORCHRUN: Final = "torchrun"
SRUN: Final = "srun"
OTHER_JOB: Final = "job"


def visible_device_ids(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The entries of CUDA_VISIBLE_DEVICES as CUDA reads them, for messages; None when it is not set (every device
    is visible). CUDA stops at the first entry it cannot read: an index like -1, or an empty entry."""
    value = environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    ids = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        ids.append(entry)
    return tuple(ids)


def launcher_of(environ: Mapping[str, str]) -> Launcher | None:
    """TORCHRUN, SRUN or OTHER_JOB for a process that is a rank of a job (RANK and WORLD_SIZE set), None otherwise."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    if "LOCAL_RANK" in environ:
        return TORCHRUN
    return SRUN if "SLURM_LOCALID" in environ else OTHER_JOB


def slurm_step_gpus(environ: Mapping[str, str]) -> int | None:
    """The GPUs the Slurm step holds on this node, for a task srun started in place; None for any other process
    (torchrun's ranks inherit the Slurm variables of the one task that runs torchrun, whose binding is not theirs)."""
    return step_gpus_on_node(environ) if launcher_of(environ) == SRUN else None


def step_gpus_on_node(environ: Mapping[str, str]) -> int | None:
    """The GPUs the Slurm step holds on this node, as Slurm says it, for any process of the step, bound or not.

    SLURM_GPUS_ON_NODE first. In a task with a GPU binding (--gpus-per-task, --gpu-bind), slurmstepd rewrites the
    task's variables (gres_common_gpu_set_env in src/plugins/gres/common/gres_common.c, Slurm 21.08 and later):
    SLURM_GPUS_ON_NODE counts the step's allocation on the node, while SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES list
    only the GPUs the task may use (common_gres_set_env keeps those in its usable_gres). So task 2, bound to one of
    the step's 4 GPUs, sees SLURM_GPUS_ON_NODE=4 beside SLURM_STEP_GPUS=2 and CUDA_VISIBLE_DEVICES=2 under task/none,
    or beside CUDA_VISIBLE_DEVICES=0 (and SLURM_STEP_GPUS=0, the step's first GPU, in every task) where ConstrainDevices
    gives each task a device cgroup and Slurm numbers its devices locally. SLURM_STEP_GPUS is the fallback for a Slurm
    older than 21.08, where it is right for unbound tasks only."""
    counted = environ.get("SLURM_GPUS_ON_NODE", "").strip()
    if counted.isdigit():
        return int(counted)
    # not SLURM_JOB_GPUS: the job may hold more GPUs on the node than this step, which would read as a binding
    listed = environ.get("SLURM_STEP_GPUS", "").strip()
    return len([gpu for gpu in listed.split(",") if gpu.strip()]) if listed else None


def slurm_tasks_on_node(environ: Mapping[str, str]) -> int | None:
    """Tasks of the Slurm step on this node: SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), e.g. "8(x2),4",
    at this node's position SLURM_NODEID; else SLURM_NTASKS_PER_NODE; None when Slurm says neither."""
    node = environ.get("SLURM_NODEID", "0")
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        counts = _expand_tasks_per_node(environ.get(name, ""))
        if counts and node.isdigit() and int(node) < len(counts):
            return counts[int(node)]
    value = environ.get("SLURM_NTASKS_PER_NODE", "")
    return int(value) if value.isdigit() else None


def _expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed list, "2(x3),1" → [2, 2, 2, 1]; [] when it is not one."""
    counts = []
    for part in filter(None, (part.strip() for part in text.split(","))):
        count, _, repeat = part.partition("(x")
        repeat = repeat.rstrip(")") or "1"
        if not (count.isdigit() and repeat.isdigit()):
            return []
        counts += [int(count)] * int(repeat)
    return counts


def gpu_index(*, local_rank: int, local_ranks: int | None, visible: int, backend: Backend,
              step_gpus: int | None = None, launcher: Launcher | None = None,
              visible_ids: tuple[str, ...] | None = None) -> int:
    """The index, among the devices this process sees, of the GPU local rank `local_rank` uses; a CommbenchError
    (one line, with the fix) where the ranks on this node cannot each have a GPU of their own and NCCL needs that.

    local_ranks: ranks of the job on this node (None: unknown, nothing to check); visible: CUDA devices this
    process sees; step_gpus: the Slurm step's GPUs on this node for an srun task (slurm_step_gpus); launcher:
    TORCHRUN, SRUN, OTHER_JOB, or None when commbench launches the ranks itself (only the fix named differs)."""
    shown = f" (CUDA_VISIBLE_DEVICES={','.join(visible_ids)})" if visible_ids else ""
    if visible < 1:
        raise CommbenchError(f"this process sees no CUDA device{shown}; give the ranks GPUs (srun --gpus-per-task=1, "
                             "or a CUDA_VISIBLE_DEVICES that lists them), or use --device cpu")
    bound_per_task = step_gpus is not None and visible < step_gpus
    if backend == NCCL and local_ranks is not None:
        if bound_per_task and step_gpus is not None and local_ranks > step_gpus:
            raise CommbenchError(f"{local_ranks} srun tasks on this node and the Slurm step holds {step_gpus} GPU(s) "
                                 "there: NCCL needs one GPU per rank; start at most one task per GPU (srun "
                                 "--gpus-per-task=1), or use --backend gloo")
        if not bound_per_task and local_ranks > visible:
            raise CommbenchError(f"{local_ranks} ranks on this machine exceed its {visible} visible GPU(s){shown}: "
                                 f"NCCL needs one GPU per rank; {_fewer_ranks(launcher, visible)}, or --backend gloo")
    return local_rank % visible


def ranks_per_gpu(*, local_ranks: int, visible: int, step_gpus: int | None = None) -> int:
    """The most ranks of this node on one GPU, as gpu_index places them: ranks share a GPU only with gloo on CUDA
    tensors, or with more ranks than GPUs."""
    gpus = step_gpus if step_gpus is not None and visible < step_gpus else visible
    return max(1, -(-local_ranks // max(1, gpus)))


def _fewer_ranks(launcher: Launcher | None, visible: int) -> str:
    if launcher == SRUN:
        return (f"bind a GPU to each task (srun --gpus-per-task=1 or --gpu-bind=single:1), or start {visible} task(s) "
                "per node or fewer")
    if launcher == TORCHRUN:
        return f"start {visible} rank(s) per node or fewer (torchrun --nproc-per-node {visible})"
    if launcher == OTHER_JOB:
        return f"start {visible} rank(s) per node or fewer"
    return f"use --nproc {visible} or fewer (or fewer ranks per node)"
