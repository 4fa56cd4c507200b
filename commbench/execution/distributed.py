"""The rank's view of the job: one process group per process (every bench of a launch runs in it), and the few
cross-rank reductions the harness needs."""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from commbench.machine import Machine
from commbench.names import MAX, MEAN, MIN, NCCL, RANK0, Backend, Device, RankAverage
from commbench.platform import CpuPlatform, platform_for

T = TypeVar("T")


@dataclass
class RankContext:
    rank: int
    world: int
    local_rank: int
    local_world: int
    """Ranks of the job on this machine."""
    backend: Backend
    platform: CpuPlatform
    """What differs between device types (timer, synchronize, memory, sampler, P2P batching): commbench/platform.py."""
    _token: torch.Tensor | None = field(default=None, init=False, repr=False)
    """meet_on_device's one element."""

    @property
    def device(self) -> torch.device:
        return self.platform.device

    def barrier(self) -> None:
        dist.barrier()

    def meet_on_device(self) -> None:
        """Every rank meets on its device, in stream order: a one-element all_reduce on the current stream. Queued
        after a timer's spin and before its start event, it ends on every rank only once the slowest rank's spin has
        ended, so the timed calls start together (measure/timers.CudaTimer)."""
        dist.all_reduce(self._meeting_token())

    def _meeting_token(self) -> torch.Tensor:
        if self._token is None:  # made once, outside any timed stretch's issue
            self._token = torch.zeros(1, dtype=torch.float32, device=self.device)
        return self._token

    def _tensor(self, values: list[float] | list[int], dtype: torch.dtype) -> torch.Tensor:
        # NCCL reduces device tensors only; gloo reduces whatever device the bench runs on.
        return torch.tensor(values, dtype=dtype, device=self.device)

    def max_over_ranks(self, values: list[float]) -> list[float]:
        """Element-wise maximum over ranks: an iteration lasts as long as its slowest rank."""
        tensor = self._tensor(values, torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    def mean_over_ranks(self, values: list[float]) -> list[float]:
        """Element-wise mean over ranks: nccl-tests' convention for a batch's time per call."""
        tensor = self._tensor(values, torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return [value / self.world for value in tensor.tolist()]

    def combine_over_ranks(self, values: list[float], how: RankAverage) -> list[float]:
        """Element-wise over ranks as nccl-tests' -a says (names.RANK_AVERAGES): rank 0's values, the mean, the
        minimum or the maximum; the same result on every rank."""
        if how == MEAN:
            return self.mean_over_ranks(values)
        tensor = self._tensor(values, torch.float64)
        if how == RANK0:
            dist.broadcast(tensor, src=0)
        else:
            dist.all_reduce(tensor, op={MIN: dist.ReduceOp.MIN, MAX: dist.ReduceOp.MAX}[how])
        return tensor.tolist()

    def sum_over_ranks(self, value: int) -> int:
        tensor = self._tensor([value], torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return int(tensor.item())

    def gather_objects(self, obj: T) -> list[T]:
        """Every rank's value, by rank."""
        gathered: list[Any] = [None] * self.world  # filled with every rank's value by the gather
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast_object(self, obj: T | None) -> T:
        """Rank 0's value on every rank (the others pass None, or a value of the same type)."""
        shared: list[Any] = [obj]  # rank 0's value, unpickled here
        dist.broadcast_object_list(shared, src=0)
        return shared[0]


def init_group(machine: Machine, *, backend: Backend, device_type: Device, timeout_s: float) -> RankContext:
    """Join the job torchrun (or srun with RANK/WORLD_SIZE/MASTER_ADDR set) started; one GPU per local rank.
    The timeout bounds how long a collective waits for a dead or hung peer."""
    if machine.rank is None or machine.world_size is None:
        raise RuntimeError("a rank's process group needs RANK and WORLD_SIZE (torchrun or srun sets them)")
    platform = platform_for(backend=backend, device_type=device_type, machine=machine)
    ctx = RankContext(rank=machine.rank, world=machine.world_size, local_rank=machine.local_rank,
                      local_world=machine.local_world_size or machine.world_size, backend=backend, platform=platform)
    options: dict[str, Any] = {"device_id": ctx.device} if backend == NCCL else {}
    dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world,
                            timeout=timedelta(seconds=timeout_s), **options)
    return ctx


def shutdown(*, clean: bool = True) -> None:
    """Leave the process group. After a clean run, wait for every rank first: a rank that tears gloo down while a
    peer still talks to it makes that peer abort ("terminate called without an active exception", seen at the end
    of training sweeps). After a failure, do not wait: a peer may be dead."""
    if dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
