"""Before a sweep launches: does its largest point fit in the memory its ranks will have? Refused (exit 2) when not,
naming what the point needs, what there is, and the largest size that fits, instead of a rank dying mid-sweep on an
allocation (exit 3).

A point needs, on each rank, the buffers its collective allocates (each collective states them next to its
make_buffers: Collective.buffer_elements; all_gather's output is n × its input, all_to_all holds two world-sized
buffers), the ring's spare space when the ring runs it, and the check's working memory (check_data.working_bytes).
On CPU the ranks on this machine draw from its RAM together (machine.host_memory_bytes: MemAvailable, or the room
under a cgroup limit); on CUDA each GPU holds the ranks placed on it (gpu_mapping.ranks_per_gpu: one with NCCL)
within the memory of the smallest device here (machine.gpu_memory_bytes, NVML's). Where a figure is unknown (no
NVML, no /proc/meminfo) nothing is refused, and a warning says the plan was skipped and why; a machine stated for
other nodes (a Slurm or Kubernetes submission) is planned by its ranks when the job starts, so nothing is said there.

These figures count what commbench allocates. On a GPU the CUDA context of each rank on it and, with NCCL, one
communicator's buffers come first: the plan holds them back as a stated reserve (gpu_reserve: CUDA_CONTEXT_BYTES per
rank, NCCL_BUFFERS_BYTES per NCCL rank) and fits the point into what is left; the refusal names the reserve. The
figures are stated, not measured: the launcher makes no CUDA context (torch.cuda.mem_get_info would make one and hold
it for the launch's life), and NVML reports no future process's context. What the reserve leaves out (NVLS buffers,
all_to_all's connections to every peer, gloo's scratch, the process itself) still comes on top, so fitting is
necessary, not sufficient: a refusal is all but certain, a pass is not a promise. Imports no torch (planning happens
in the launching process).
"""

import warnings
from dataclasses import dataclass

from commbench.collectives import check_data, get_collective
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.gpu_mapping import ranks_per_gpu
from commbench.machine import Machine
from commbench.names import CPU, DTYPE_BYTES, FLOATING_DTYPES, NCCL
from commbench.sweep.spec import SweepSpec, impls_for, ops_for, placements_for
from commbench.units import format_bytes, readable, round_down_to_unit, size_text

MiB, GiB = 2**20, 2**30

CUDA_CONTEXT_BYTES = 512 * MiB
"""One process's CUDA context on a GPU, as torch makes it with lazy module loading (its default since torch 1.13 on
CUDA 11.7+): 287 MB measured in pytorch/pytorch PR 86509, about 400 MB per pytorch/pytorch issue 109888 (a torch
maintainer), 426 MiB on an RTX 6000 Ada (unslothai/unsloth-zoo PR 1053); rounded up to 512 MiB for Hopper and for the
NCCL kernels a rank loads into it."""
NCCL_BUFFERS_BYTES = 1 * GiB
"""One NCCL communicator's buffers on a rank's GPU, at NCCL's defaults. Each connection of each channel holds one
buffer per protocol: Simple 4 MiB (NCCL_BUFFSIZE's default, DEFAULT_BUFFSIZE = 1 << 22 in NCCL's src/init.cc), LL
512 KiB (8 lines x 512 threads x 8 steps x 16 B) and LL128 4.69 MiB (120 elements x 640 threads x 8 steps x 8 B),
9.2 MiB in all; with 32 channels (Hopper over NVLink) and the ring's and the tree's connections, about 0.9 GiB.
NVIDIA/nccl issue 964 measured 544-688 MB per communicator on 4 x A100 after an all_reduce. Left out, so that a refusal
stays certain: NVLink SHARP's buffers on NVSwitch systems (1 GiB bound at init on 8 x H100 in an NCCL_DEBUG log of
NVIDIA/nccl-tests issue 216; NCCL_NVLS_ENABLE=0 drops them) and all_to_all's connections to every peer (3.3 GB more on
8 x H100, NVIDIA/nccl issue 1685)."""


@dataclass(frozen=True)
class Pool:
    """The memory a set of ranks shares: how much, how many ranks draw from it, and what it is (for messages); on a
    GPU, less a reserve for what comes before commbench's buffers (the CUDA contexts, NCCL's buffers)."""

    available: int
    ranks: int
    what: str
    reserve: int = 0
    reserve_what: str = ""

    @property
    def usable(self) -> int:
        """What the sweep's buffers may take: the memory less the reserve."""
        return max(self.available - self.reserve, 0)


def gpu_reserve(*, ranks: int, backend: str) -> tuple[int, str]:
    """The GPU memory held back from the plan for `ranks` ranks on one GPU, and what it is (for messages): a CUDA
    context per rank, and NCCL's buffers per rank where the backend is NCCL."""
    contexts = (f"{ranks} CUDA contexts ({format_bytes(CUDA_CONTEXT_BYTES)} each)" if ranks > 1
                else f"the CUDA context ({format_bytes(CUDA_CONTEXT_BYTES)})")
    if backend != NCCL:
        return ranks * CUDA_CONTEXT_BYTES, contexts
    return (ranks * (CUDA_CONTEXT_BYTES + NCCL_BUFFERS_BYTES),
            f"{contexts} and NCCL's buffers ({format_bytes(NCCL_BUFFERS_BYTES)}{' each' if ranks > 1 else ''})")


@dataclass(frozen=True)
class Need:
    """The most one rank needs at one size: in which case (collective, dtype, placement, implementation)."""

    per_rank: int
    case: str


def pool_for(spec: SweepSpec, machine: Machine) -> Pool | None:
    """The memory the sweep's ranks on this machine share, None when it is not known."""
    ranks_here = (machine.local_world_size or 1) if machine.in_job else spec.nproc
    if spec.device == CPU:
        if machine.host_memory_bytes is None:
            return None
        return Pool(machine.host_memory_bytes, ranks_here, "this machine's available memory (MemAvailable, or the "
                                                           "room under its cgroup's limit)")
    if machine.gpu_memory_bytes is None:
        return None
    sharing = ranks_per_gpu(local_ranks=ranks_here, visible=machine.gpus,
                            step_gpus=machine.step_gpus if machine.in_job else None)
    reserve, reserve_what = gpu_reserve(ranks=sharing, backend=spec.backend)
    return Pool(machine.gpu_memory_bytes, sharing, "the memory of one GPU (the smallest here, NVML's)", reserve,
                reserve_what)


def need_at(spec: SweepSpec, size_bytes: int) -> Need:
    """What one rank needs for the hungriest point at this requested size, over the sweep's collectives,
    implementations, dtypes, ops and placements."""
    world, worst = spec.nproc, Need(0, "")
    for name in spec.collectives:
        collective = get_collective(name)
        for impl in impls_for(spec, name):
            for dtype in spec.dtypes:
                layout = collective.layout(size_bytes, DTYPE_BYTES[dtype], world)
                for inplace in placements_for(spec, name):
                    buffers = collective.memory_bytes(layout, inplace=inplace, impl=impl, world=world)
                    checking = max((check_data.working_bytes(elt_bytes=DTYPE_BYTES[dtype], world=world, op=op,
                                                             floating=dtype in FLOATING_DTYPES)
                                    for op in ops_for(spec, name)), default=0) if spec.check else 0
                    if buffers + checking > worst.per_rank:
                        placement = "in place" if inplace else "out of place"
                        impl_named = "" if impl == "builtin" else f" ({impl})"
                        worst = Need(buffers + checking, f"{name}{impl_named} {dtype} {placement} "
                                                         f"{format_bytes(layout.size_bytes)}")
    return worst


def check_fits(spec: SweepSpec, machine: Machine) -> None:
    """Refuse, before anything launches, a sweep whose largest point cannot fit in the memory its ranks share."""
    pool = pool_for(spec, machine)
    if pool is None:
        if not machine.stated:  # the ranks on the compute nodes plan it themselves when the job starts
            warnings.warn(skipped_text(spec), CommbenchWarning, stacklevel=2)
        return
    need = need_at(spec, max(spec.sizes))
    if need.per_rank * pool.ranks <= pool.usable:
        return
    parts = (f"{readable(need.per_rank)} per rank for its buffers and check data, × {pool.ranks} ranks"
             if pool.ranks > 1 else "its buffers and check data")
    fits = largest_fitting_size(spec, pool)
    advice = f"sizes up to {size_text(fits)} fit: end --sizes there" if fits else "not even the smallest size fits"
    fewer = ", or run fewer ranks on this machine" if pool.ranks > 1 else ""
    reserved = (f", {readable(pool.usable)} after a {readable(pool.reserve)} reserve for {pool.reserve_what}"
                if pool.reserve else "")
    raise CommbenchError(f"the sweep's largest point, {need.case}, needs {readable(need.per_rank * pool.ranks)} "
                         f"({parts}), and {pool.what} is {readable(pool.available)}{reserved}; {advice}{fewer}")


def skipped_text(spec: SweepSpec) -> str:
    """The warning of a plan skipped for want of the memory figure: which figure, and what happens instead."""
    what = ("this machine's available memory (no MemAvailable in /proc/meminfo, no cgroup limit)" if spec.device == CPU
            else "the memory of its GPUs (NVML gave none)")
    return (f"memory plan skipped: {what} is unknown, so the sweep's largest point ({size_text(max(spec.sizes))}) was "
            "not checked against it; a point that does not fit fails in the run (exit 3) instead of being refused now")


def largest_fitting_size(spec: SweepSpec, pool: Pool) -> int | None:
    """The largest size at which every point of the sweep fits, rounded down to a whole number of its largest unit
    (as --sizes takes it: 7G, not 7.3 GiB); None when not even one byte's worth does. The need grows with the size,
    so it is a bisection."""
    def fits(size: int) -> bool:
        return need_at(spec, size).per_rank * pool.ranks <= pool.usable

    low, high = 0, max(spec.sizes)  # fits(low) holds by convention, fits(high) does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    if low < 1:
        return None
    return round_down_to_unit(low)
