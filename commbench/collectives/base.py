"""What a collective declares (the nccl-tests `testColl` pattern): layout, buffers, runner, bytes, busbw factor, check."""

from dataclasses import dataclass
from typing import Callable

import torch

from commbench.collectives import check_data

IMPLEMENTATIONS = ("builtin",)
# nccl-tests keeps every rank's chunk 16-byte aligned: per-rank counts are rounded down to a multiple of 16/elt.
_ALIGN_BYTES = 16


@dataclass(frozen=True)
class Layout:
    """Element counts of one measured point on one rank."""

    send_count: int  # elements in each rank's input
    recv_count: int  # elements in each rank's output
    count: int  # the count nccl-tests prints: the whole message, or the per-rank part for RS/AG/a2a
    elt_bytes: int

    @property
    def size_bytes(self) -> int:
        """nccl-tests' size column: the larger of the input and output buffer."""
        return max(self.send_count, self.recv_count) * self.elt_bytes


@dataclass
class Buffers:
    send: torch.Tensor
    recv: torch.Tensor


def whole_message_layout(size_bytes: int, elt_bytes: int) -> Layout:
    """All-reduce and broadcast: every rank holds the whole message."""
    count = size_bytes // elt_bytes
    return Layout(send_count=count, recv_count=count, count=count, elt_bytes=elt_bytes)


def per_rank_count(size_bytes: int, elt_bytes: int, world: int) -> int:
    """Elements per rank for RS/AG/a2a, rounded down as nccl-tests does (multiple of world size and 16 bytes)."""
    per_rank = (size_bytes // elt_bytes) // world
    alignment = max(1, _ALIGN_BYTES // elt_bytes)
    return per_rank - per_rank % alignment


class Collective:
    """One collective: subclasses live one per file in this package and are found by the registry."""

    name: str = ""
    reduces: bool = False  # takes a reduction op (sum, max, …)
    inplace_choices: tuple[bool, ...] = (False, True)  # placements torch.distributed can express
    root: int = -1  # the root rank nccl-tests prints; -1 for collectives without one

    def layout(self, size_bytes: int, elt_bytes: int, world: int) -> Layout:
        raise NotImplementedError

    def algbw_bytes(self, layout: Layout, world: int) -> int:
        """S in algbw = S / t (nccl-tests doc/PERFORMANCE.md)."""
        raise NotImplementedError

    def busbw_factor(self, world: int) -> float:
        raise NotImplementedError

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int) -> Buffers:
        raise NotImplementedError

    def fill_inputs(self, buffers: Buffers, *, rank: int, world: int) -> None:
        """Write this rank's check pattern into the input (the same data is used for timing)."""
        pattern = check_data.rank_pattern(rank, 0, buffers.send.numel(), world=world, dtype=buffers.send.dtype,
                                          device=buffers.send.device)
        buffers.send.copy_(pattern)

    def builtin(self, buffers: Buffers, *, op, group, rank: int) -> Callable[[], object]:
        """A zero-argument call that runs the backend's own collective once on these buffers."""
        raise NotImplementedError

    def expected(self, layout: Layout, *, rank: int, world: int, op: str, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        """The exact output this rank must hold after one run on freshly filled inputs."""
        raise NotImplementedError

    def runner(self, impl: str, buffers: Buffers, *, op, group, rank: int) -> Callable[[], object]:
        if impl == "builtin":
            return self.builtin(buffers, op=op, group=group, rank=rank)
        raise ValueError(f"{self.name} has no implementation {impl!r}")
