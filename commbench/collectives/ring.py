"""The hand-written ring over point-to-point sends: reduce-scatter, all-gather and all-reduce (= the two in a row).

With n ranks the buffer is cut into n chunks. In step s (0 … n−2) rank r sends one chunk to r+1 and receives one
from r−1, so every rank sends n−1 chunks per phase: (n−1)/n·S bytes for reduce-scatter or all-gather and
2(n−1)/n·S for all-reduce. Each step is cut into K pieces: piece k of step s+1 leaves as soon as piece k of step s
has arrived (and been reduced), so communication of one piece overlaps the reduction of the next.

Every view the loop touches is prepared when the runner is built, outside the timed region; a call does only the
sends, receives, waits and reductions.
"""

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

_MIN_PIECE_BYTES = 4 * 1024**2  # see default_pieces
_MAX_PIECES = 4


def default_pieces(chunk_bytes: int) -> int:
    """K when --ring-chunks is not given: pieces of at least 4 MiB, at most 4 (measured: benchmarks/ring_chunks.py)."""
    return max(1, min(_MAX_PIECES, chunk_bytes // _MIN_PIECE_BYTES))


_REDUCE = {
    "sum": torch.add,
    "avg": torch.add,  # avg = sum, then one division of the rank's own chunk
    "max": torch.maximum,
    "min": torch.minimum,
}


class _Transport:
    """Posts one send to rank r+1 and one receive from rank r−1, and counts the bytes it sends."""

    def __init__(self, *, rank: int, world: int, backend: str):
        self.next, self.prev = (rank + 1) % world, (rank - 1) % world
        self._batched = backend == "nccl"  # NCCL pairs a step's send and receive in one group
        self.bytes_sent = 0

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, tag: int) -> tuple[list, list]:
        self.bytes_sent += send.nbytes
        if self._batched:
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, self.next, tag=tag),
                                            dist.P2POp(dist.irecv, recv, self.prev, tag=tag)])
            return works, works
        return [dist.isend(send, self.next, tag=tag)], [dist.irecv(recv, self.prev, tag=tag)]


@dataclass
class _Piece:
    """One piece of one step: what leaves, where the peer's piece lands, and (reduce phases) where it is reduced."""

    send: torch.Tensor
    recv: torch.Tensor
    own: torch.Tensor | None = None  # this rank's contribution to the received chunk
    into: torch.Tensor | None = None  # where own (op) recv is written


def _split(tensor: torch.Tensor, parts: int) -> list[torch.Tensor]:
    return list(torch.tensor_split(tensor, parts))


class RingRunner:
    """One call runs the whole ring once; `bytes_sent` holds what the last call sent from this rank."""

    def __init__(self, *, transport: _Transport, phases: list[list[list[_Piece]]], reduce: Callable | None,
                 before: Callable[[], None] | None = None, after: Callable[[], None] | None = None):
        self._transport, self._phases, self._reduce = transport, phases, reduce
        self._before, self._after = before, after
        self.pieces = len(phases[0][0]) if phases else 1  # K, pieces in flight per step
        self.bytes_sent = 0

    def __call__(self) -> None:
        self._transport.bytes_sent = 0
        if self._before:
            self._before()
        for steps in self._phases:
            self._run_phase(steps)
        if self._after:
            self._after()
        self.bytes_sent = self._transport.bytes_sent

    def _run_phase(self, steps: list[list[_Piece]]) -> None:
        exchange, reduce = self._transport.exchange, self._reduce
        pieces = len(steps[0])
        sends, recvs = [None] * pieces, [None] * pieces
        earlier_sends: list = [[] for _ in range(pieces)]
        for k, piece in enumerate(steps[0]):
            sends[k], recvs[k] = exchange(piece.send, piece.recv, k)
        for step_index, step in enumerate(steps):
            following = steps[step_index + 1] if step_index + 1 < len(steps) else None
            for k, piece in enumerate(step):
                for work in recvs[k]:
                    work.wait()
                # The scratch piece written now was sent one step earlier: that send must be done.
                for work in earlier_sends[k]:
                    work.wait()
                if piece.into is not None:
                    reduce(piece.own, piece.recv, out=piece.into)
                earlier_sends[k] = sends[k]
                if following is not None:
                    sends[k], recvs[k] = exchange(following[k].send, following[k].recv, k)
        # earlier_sends now holds the last step's sends; every other send was waited for once already (a gloo send
        # waited for twice blocks forever)
        for works in earlier_sends:
            for work in works:
                work.wait()


def _reduce_phase(*, chunk_of: Callable[[int], torch.Tensor], rank: int, world: int, pieces: int,
                  scratch: list[torch.Tensor] | None, final: torch.Tensor, recv_space: list[torch.Tensor]
                  ) -> list[list[_Piece]]:
    """Reduce-scatter steps ending with the reduction of chunk `rank` in `final`.

    Step s sends chunk (r−s−1) (this rank's input at s = 0, else the partial sum it made in step s−1) and receives
    the peer's partial sum of chunk (r−s−2), reduced with its own input of that chunk into scratch[(s+1) % 2] (or,
    with scratch None, in place into the chunk itself), and into `final` at the last step.
    """
    steps, made = [], None
    for step in range(world - 1):
        sent = chunk_of((rank - step - 1) % world) if made is None else made
        received = (rank - step - 2) % world
        own = chunk_of(received)
        if step == world - 2:
            into = final
        else:
            into = own if scratch is None else scratch[(step + 1) % 2][: own.numel()]
        landing = recv_space[step % 2][: own.numel()]
        steps.append([_Piece(send, recv, own_piece, into_piece) for send, recv, own_piece, into_piece in zip(
            _split(sent, pieces), _split(landing, pieces), _split(own, pieces), _split(into, pieces))])
        made = into
    return steps


def _gather_phase(*, chunk_of: Callable[[int], torch.Tensor], rank: int, world: int,
                  pieces: int) -> list[list[_Piece]]:
    """All-gather steps: step s forwards chunk (r−s) and receives chunk (r−s−1) straight into its place."""
    return [[_Piece(send, recv) for send, recv in zip(_split(chunk_of((rank - step) % world), pieces),
                                                      _split(chunk_of((rank - step - 1) % world), pieces))]
            for step in range(world - 1)]


def _pieces_for(ring_chunks: int | None, chunk: torch.Tensor) -> int:
    pieces = ring_chunks if ring_chunks is not None else default_pieces(chunk.nbytes)
    return max(1, min(pieces, chunk.numel()))


def _average(chunk: torch.Tensor, world: int) -> Callable[[], None]:
    if chunk.dtype.is_floating_point:
        return lambda: chunk.div_(world)
    return lambda: chunk.div_(world, rounding_mode="floor")


def reduce_scatter(send: torch.Tensor, recv: torch.Tensor, *, rank: int, world: int, backend: str, op: str,
                   ring_chunks: int | None) -> RingRunner:
    """recv ← chunk `rank` of the reduction of every rank's send; send is left as it was."""
    chunks = _split(send, world)
    transport = _Transport(rank=rank, world=world, backend=backend)
    if world == 1:
        return RingRunner(transport=transport, phases=[], reduce=None,
                          before=None if recv.data_ptr() == send.data_ptr() else lambda: recv.copy_(send))
    pieces = _pieces_for(ring_chunks, recv)
    # double-buffered partial sums and landing space, allocated here, never in the timed call
    scratch = [torch.empty_like(recv) for _ in range(2)]
    landing = [torch.empty_like(recv) for _ in range(2)]
    steps = _reduce_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=pieces, scratch=scratch,
                          final=recv, recv_space=landing)
    return RingRunner(transport=transport, phases=[steps], reduce=_REDUCE[op],
                      after=_average(recv, world) if op == "avg" else None)


def all_gather(send: torch.Tensor, recv: torch.Tensor, *, rank: int, world: int, backend: str,
               ring_chunks: int | None) -> RingRunner:
    """recv ← every rank's send, in rank order."""
    chunks = _split(recv, world)
    own = chunks[rank]
    copy_own = None if own.data_ptr() == send.data_ptr() else (lambda: own.copy_(send))
    transport = _Transport(rank=rank, world=world, backend=backend)
    steps = _gather_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=_pieces_for(ring_chunks, send))
    return RingRunner(transport=transport, phases=[steps] if world > 1 else [], reduce=None, before=copy_own)


def all_reduce(buffer: torch.Tensor, *, rank: int, world: int, backend: str, op: str,
               ring_chunks: int | None) -> RingRunner:
    """buffer ← the reduction of every rank's buffer, in place: reduce-scatter, then all-gather, over n chunks
    whose sizes differ by at most one element when the count does not divide by n."""
    transport = _Transport(rank=rank, world=world, backend=backend)
    if world == 1:
        return RingRunner(transport=transport, phases=[], reduce=None)
    chunks = _split(buffer, world)
    largest = chunks[0]
    pieces = _pieces_for(ring_chunks, largest)
    landing = [torch.empty_like(largest) for _ in range(2)]
    reduce_steps = _reduce_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=pieces, scratch=None,
                                 final=chunks[rank], recv_space=landing)
    gather_steps = _gather_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=pieces)
    average = _average(chunks[rank], world) if op == "avg" else None
    if average is None:
        return RingRunner(transport=transport, phases=[reduce_steps, gather_steps], reduce=_REDUCE[op])
    # avg: divide the own chunk between the phases, so every rank receives finished averages
    return _TwoPhaseAverage(transport, reduce_steps, gather_steps, _REDUCE[op], average)


class _TwoPhaseAverage(RingRunner):
    def __init__(self, transport, reduce_steps, gather_steps, reduce, average):
        super().__init__(transport=transport, phases=[reduce_steps, gather_steps], reduce=reduce)
        self._average = average

    def _run_phase(self, steps):
        super()._run_phase(steps)
        if steps is self._phases[0]:
            self._average()
