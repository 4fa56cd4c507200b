"""The rank's view of the job: process-group setup and the few cross-rank reductions the harness needs."""

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass
class RankContext:
    rank: int
    world: int
    local_rank: int
    backend: str
    device: torch.device

    def barrier(self) -> None:
        dist.barrier()

    def _tensor(self, values, dtype) -> torch.Tensor:
        # NCCL reduces device tensors only; gloo reduces whatever device the sweep runs on.
        return torch.tensor(values, dtype=dtype, device=self.device)

    def max_over_ranks(self, values: list[float]) -> list[float]:
        """Element-wise maximum over ranks: an iteration lasts as long as its slowest rank."""
        tensor = self._tensor(values, torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.tolist()

    def sum_over_ranks(self, value: int) -> int:
        tensor = self._tensor([value], torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return int(tensor.item())

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when it is true on at least one: keeps decisions identical across ranks."""
        return self.sum_over_ranks(int(flag)) > 0

    def gather_objects(self, obj) -> list:
        gathered = [None] * self.world
        dist.all_gather_object(gathered, obj)
        return gathered


# Inside shared_process_group(), benches join the one group of the suite instead of creating and destroying their own.
_shared = False


@contextlib.contextmanager
def shared_process_group(*, backend: str, device_type: str, timeout_s: float):
    """One process group for several benches run one after another (a suite in one launch): init_rank joins it and
    shutdown leaves it up until the end. Destroying and re-creating a group in one torchrun job is avoidable churn
    (a new rendezvous on the agent's store per bench)."""
    global _shared
    init_rank(backend=backend, device_type=device_type, timeout_s=timeout_s)
    _shared = True
    group = SharedGroup()
    try:
        yield group
    except BaseException:
        group.clean = False
        raise
    finally:
        _shared = False
        shutdown(clean=group.clean)


@dataclass
class SharedGroup:
    clean: bool = True
    """Set False when a bench failed: a peer may be gone, so the end must not wait for it."""


def init_rank(*, backend: str, device_type: str, timeout_s: float) -> RankContext:
    """Join the job torchrun (or srun with RANK/WORLD_SIZE/MASTER_ADDR set) started; one GPU per local rank."""
    if _shared and dist.is_initialized():
        if dist.get_backend() != backend:
            raise RuntimeError(f"a bench asked for {backend} inside a suite running on {dist.get_backend()}")
        return _context(backend, device_type)
    ctx = _context(backend, device_type)
    options = {"device_id": ctx.device} if backend == "nccl" else {}
    # The timeout bounds how long a collective waits for a dead or hung peer.
    dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world,
                            timeout=timedelta(seconds=timeout_s), **options)
    return ctx


def _context(backend: str, device_type: str) -> RankContext:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
    if device_type == "cuda":
        # gloo may put several ranks on one GPU; NCCL was checked to have one GPU per rank.
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return RankContext(rank=rank, world=world, local_rank=local_rank, backend=backend, device=device)


def shutdown(*, clean: bool = True) -> None:
    """Leave the process group. After a clean run, wait for every rank first: a rank that tears gloo down while a
    peer still talks to it makes that peer abort ("terminate called without an active exception", seen at the end
    of training sweeps). After a failure, do not wait: a peer may be dead. In a shared group, only wait."""
    if _shared:
        if clean:
            dist.barrier()
        return
    if dist.is_initialized():
        if clean:
            dist.barrier()
        dist.destroy_process_group()
