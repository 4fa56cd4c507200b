"""What a collective declares (nccl-tests' `testColl` pattern): layout, buffers, runner, bytes, busbw factor, check.

Layouts and byte counts are plain arithmetic, which the launching process needs to plan a sweep; torch and the check
patterns are imported inside the methods that the ranks run, so planning never loads torch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from commbench.names import BUILTIN, Implementation, OpName, busbw_factor

if TYPE_CHECKING:
    import torch
    import torch.distributed as dist

    from commbench.collectives import check_data

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

    @property
    def shared(self) -> bool:
        """The input lies in the output's memory (in place): a run overwrites its own input."""
        return self.send.untyped_storage().data_ptr() == self.recv.untyped_storage().data_ptr()


@dataclass(frozen=True, kw_only=True)
class RunSetup:
    """What an implementation needs to know about this rank and point."""

    rank: int
    world: int
    p2p_batched: bool  # send and receive of a ring step go in one group (NCCL's batch_isend_irecv)
    op: OpName  # sum, max, min, avg, or "none" for collectives that do not reduce
    ring_chunks: int | None = None  # pieces in flight per ring step; None = ring.default_pieces
    root: int = 0  # the rank a broadcast sends from and a reduce reduces to (--root)

    @property
    def reduce_op(self) -> dist.ReduceOp.RedOpType | None:
        """torch's ReduceOp for op; None for "none" (a collective that does not reduce)."""
        from commbench.backends import REDUCE_OPS

        return REDUCE_OPS.get(self.op)


Runner = Callable[[], object]
"""One call of a collective on prepared buffers: what the timers time."""


class Collective(ABC):
    """One collective: subclasses live one per file in this package and are found by the registry. The abstract
    methods are what each collective must state; mypy refuses to instantiate a subclass that lacks one."""

    name: str = ""
    reduces: bool = False  # takes a reduction op (sum, max, …)
    inplace_choices: tuple[bool, ...] = (False, True)  # placements torch.distributed can express
    has_root: bool = False  # sends from or gathers to one rank (--root); nccl-tests prints -1 for the others
    implementations: tuple[Implementation, ...] = (BUILTIN,)

    @abstractmethod
    def layout(self, size_bytes: int, elt_bytes: int, world: int) -> Layout:
        """The element counts of a point of size_bytes (nccl-tests' size) at world ranks."""

    def is_noop(self, *, world: int, inplace: bool) -> bool:
        """Nothing to move: in place with one rank the output already is the input (NCCL copies only when source
        and destination differ), so the timed interval holds no work."""
        return world == 1 and inplace

    @abstractmethod
    def algbw_bytes(self, layout: Layout, world: int) -> int:
        """S in algbw = S / t (nccl-tests doc/PERFORMANCE.md)."""

    def busbw_factor(self, world: int) -> float:
        """busbw = algbw × this factor at world ranks: the collective's entry in names.BUSBW_FACTORS."""
        factor = busbw_factor(self.name, world)
        if factor is None:
            raise KeyError(f"names.BUSBW_FACTORS has no factor for {self.name} at {world} ranks")
        return factor

    def bus_bytes(self, layout: Layout, world: int) -> float:
        """Bytes each rank sends in a ring algorithm (busbw's numerator): factor × S, e.g. 2(n−1)/n·S for
        all_reduce. Rows of implementations that do not count their bytes report this as bytes_source "model"."""
        return self.busbw_factor(world) * self.algbw_bytes(layout, world)

    @abstractmethod
    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        """This rank's input and output for one point (in place the one a view of the other)."""

    @abstractmethod
    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        """Elements make_buffers allocates on one rank (in place the smaller buffer is a view of the larger). Each
        collective states its own, next to its make_buffers: the memory plan sizes a sweep with it before launch."""

    def ring_spare_elements(self, layout: Layout, world: int) -> int:
        """Elements the hand-written ring allocates besides the buffers when it runs this point (collectives/ring.py's
        spare landing and scratch space); 0 for a collective without a ring."""
        return 0

    def memory_bytes(self, layout: Layout, *, inplace: bool, impl: Implementation, world: int) -> int:
        """Bytes one rank allocates for one point: its buffers, and the ring's spares when the ring runs it. The
        check's working memory comes on top (check_data.working_bytes); the backend's own buffers are not counted."""
        elements = self.buffer_elements(layout, inplace=inplace)
        if impl == "ring":
            elements += self.ring_spare_elements(layout, world)
        return elements * layout.elt_bytes

    def fill_inputs(self, buffers: Buffers, *, rank: int, world: int, op: OpName = "none") -> None:
        """Poison the output, then write this rank's check pattern into the input (also the data that is timed).

        The poison comes first because in place the input is part of the output; it makes a collective that writes
        nothing fail the check instead of passing on what the timed runs left behind.
        """
        from commbench.collectives import check_data

        buffers.recv.fill_(check_data.POISON)
        check_data.write_input(buffers.send, rank=rank, world=world, op=op)

    def refill_for_check(self, buffers: Buffers, *, rank: int, world: int, op: OpName = "none") -> None:
        """Fresh inputs and a poisoned output for the check run, after the timed runs.

        In place the timed runs overwrote the input, so everything is filled again (poison first, as above). Out of
        place a collective only reads its input, which still holds the pattern: poisoning the output is enough, and
        saves writing the input once more (one buffer's worth at 8 GiB). An implementation that wrote into its
        input would compute the check from changed data and, most likely, fail it.
        """
        from commbench.collectives import check_data

        if buffers.shared:
            self.fill_inputs(buffers, rank=rank, world=world, op=op)
        else:
            buffers.recv.fill_(check_data.POISON)

    @abstractmethod
    def builtin(self, buffers: Buffers, setup: RunSetup) -> Runner:
        """A zero-argument call that runs the backend's own collective once on these buffers."""

    def ring(self, buffers: Buffers, setup: RunSetup) -> Runner:
        """The hand-written ring (collectives/ring.py); its runner counts the bytes it sends in `bytes_sent`. Only
        collectives that list "ring" in `implementations` define it."""
        raise NotImplementedError

    @abstractmethod
    def expected(self, layout: Layout, *, rank: int, world: int, root: int = 0) -> list[check_data.Segment] | None:
        """The exact output this rank must hold after one run on freshly filled inputs, in order: which pattern
        (a rank's input, or the reduction of all) each part of the output holds. check_data compares it slice by
        slice, never building a buffer-sized expected tensor. None: this rank's output is not defined (a reduce's
        ranks other than the root), so nothing is checked there."""

    def runner(self, impl: Implementation, buffers: Buffers, setup: RunSetup) -> Runner:
        if impl not in self.implementations:
            raise ValueError(f"{self.name} has no implementation {impl!r}")
        return self.builtin(buffers, setup) if impl == BUILTIN else self.ring(buffers, setup)

    def iteration(self, impl: Implementation, buffers: Buffers, setup: RunSetup, calls: int) -> Runner:
        """One timed iteration of `calls` calls (nccl-tests -m): the backend's own calls as one group, the ring's
        one after another (its sends are already grouped per step)."""
        call = self.runner(impl, buffers, setup)
        if calls == 1:
            return call
        if impl == "builtin":
            from commbench.collectives import torch_api

            return torch_api.grouped(call, calls)

        def one_after_another() -> None:
            for _ in range(calls):
                call()
        return one_after_another


class CollectiveModule(Protocol):
    """What each collective's module in this package defines: its COLLECTIVE, which the registry
    (collectives/__init__.py) lists; mypy checks every listed module against this."""

    @property
    def COLLECTIVE(self) -> Collective: ...


class WholeMessageCollective(Collective):
    """Every rank holds the whole message in one buffer, worked on in place (all_reduce, broadcast)."""

    inplace_choices = (True,)  # torch.distributed's all_reduce and broadcast only work in place

    def layout(self, size_bytes: int, elt_bytes: int, world: int) -> Layout:
        count = size_bytes // elt_bytes
        return Layout(send_count=count, recv_count=count, count=count, elt_bytes=elt_bytes)

    def algbw_bytes(self, layout: Layout, world: int) -> int:
        return layout.count * layout.elt_bytes

    def make_buffers(self, layout: Layout, *, inplace: bool, dtype: torch.dtype, device: torch.device,
                     rank: int, world: int) -> Buffers:
        import torch

        buffer = torch.empty(layout.count, dtype=dtype, device=device)
        return Buffers(send=buffer, recv=buffer)

    def buffer_elements(self, layout: Layout, *, inplace: bool) -> int:
        return layout.count  # one buffer, read and written in place


class PerRankCollective(Collective):
    """Each rank owns a 1/n chunk of a world-sized buffer (reduce_scatter, all_gather, all_to_all per peer).

    nccl-tests: the per-rank count is count/n rounded down to a 16-byte multiple; S = n × per-rank count × elt and
    busbw = algbw × (n−1)/n.
    """

    @abstractmethod
    def per_rank_layout(self, per_rank: int, elt_bytes: int, world: int) -> Layout:
        """The element counts when each rank's part holds per_rank elements (already aligned)."""

    def layout(self, size_bytes: int, elt_bytes: int, world: int) -> Layout:
        per_rank = (size_bytes // elt_bytes) // world
        per_rank -= per_rank % max(1, _ALIGN_BYTES // elt_bytes)
        return self.per_rank_layout(per_rank, elt_bytes, world)

    def algbw_bytes(self, layout: Layout, world: int) -> int:
        return layout.count * world * layout.elt_bytes



def whole_and_chunk(*, chunk_count: int, world: int, rank: int, inplace: bool, dtype: torch.dtype,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The world-sized buffer and this rank's chunk of it: a view in place (nccl-tests' in-place offset), else a
    separate tensor. Reduce-scatter reads the whole and writes the chunk; all-gather the other way round."""
    import torch

    whole = torch.empty(chunk_count * world, dtype=dtype, device=device)
    chunk = (whole[rank * chunk_count:(rank + 1) * chunk_count] if inplace
             else torch.empty(chunk_count, dtype=dtype, device=device))
    return whole, chunk
