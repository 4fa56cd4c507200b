"""The hand-written ring over point-to-point sends: reduce-scatter, all-gather and all-reduce (= the two in a row).

With n ranks the buffer is cut into n chunks. In step s (0 … n−2) rank r sends one chunk to r+1 and receives one
from r−1, so every rank sends n−1 chunks per phase: (n−1)/n·S bytes for reduce-scatter or all-gather and
2(n−1)/n·S for all-reduce. Each step is cut into K pieces: piece k of step s+1 leaves as soon as piece k of step s
has arrived (and been reduced), so communication of one piece overlaps the reduction of the next.

Every view the loop touches is prepared when the runner is built, outside the timed region; a call does only the
sends, receives, waits and reductions.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.distributed as dist

_MIN_PIECE_BYTES = 4 * 1024**2  # see default_pieces
_MAX_PIECES = 4


def default_pieces(chunk_bytes: int) -> int:
    """K when --ring-chunks is not given: pieces of at least 4 MiB, at most 4 (measured: benchmarks/ring_chunks.py)."""
    return max(1, min(_MAX_PIECES, chunk_bytes // _MIN_PIECE_BYTES))


_REDUCE: dict[str, Callable[..., torch.Tensor]] = {
    "sum": torch.add,
    "prod": torch.mul,
    "avg": torch.add,  # avg = sum, then one division of the rank's own chunk
    "max": torch.maximum,
    "min": torch.minimum,
}


@dataclass
class _Piece:
    """One piece of one step: what leaves, where the peer's piece lands, and (reduce phases) where it is reduced."""

    send: torch.Tensor
    recv: torch.Tensor
    own: torch.Tensor | None = None  # this rank's contribution to the received chunk
    into: torch.Tensor | None = None  # where own (op) recv is written


@dataclass
class _Phase:
    steps: list[list[_Piece]]  # [step][piece]
    rewrites_sent: bool  # writes into buffers it sent one step earlier (reduce-scatter's double-buffered scratch)
    exchanges: list[list["_Exchange"]] = field(default_factory=list)  # [step][piece], prepared with the runner


@dataclass
class _Exchange:
    nbytes: int
    post: Callable[[], tuple[list, list]]
    """Posts it: (works to wait before the sent buffer is reused, works to wait before reading recv)."""


class _Transport:
    """Sends to rank r+1 and receives from rank r−1; every exchange is prepared once, outside the timed call."""

    def __init__(self, *, rank: int, world: int, batched: bool):
        self.next, self.prev = (rank + 1) % world, (rank - 1) % world
        self._batched = batched  # NCCL pairs a step's send and receive in one group (the platform says)
        self.bytes_sent = 0

    def prepare(self, send: torch.Tensor, recv: torch.Tensor, tag: int) -> _Exchange:
        if self._batched:
            operations = [dist.P2POp(dist.isend, send, self.next, tag=tag),
                          dist.P2POp(dist.irecv, recv, self.prev, tag=tag)]
            # one coalesced NCCL work covers both; stream order protects the buffers, so there is no send to wait
            return _Exchange(send.nbytes, lambda: ([], dist.batch_isend_irecv(operations)))
        post_send = partial(dist.isend, send, self.next, tag=tag)
        post_recv = partial(dist.irecv, recv, self.prev, tag=tag)
        return _Exchange(send.nbytes, lambda: ([post_send()], [post_recv()]))

    def start(self, exchange: _Exchange) -> tuple[list, list]:
        """Post one exchange: (works to wait before the sent buffer is reused, works to wait before reading recv)."""
        self.bytes_sent += exchange.nbytes
        return exchange.post()


def _split(tensor: torch.Tensor, parts: int) -> list[torch.Tensor]:
    return list(torch.tensor_split(tensor, parts))


def _no_reduce(*args: object, **kwargs: object) -> torch.Tensor:
    """The reduce of a runner built without one: only reduce phases have pieces with `into`, and they pass one."""
    raise AssertionError("a piece to reduce in a ring built without a reduce")


class RingRunner:
    """One call runs the whole ring once; `bytes_sent` holds what the last call sent from this rank."""

    def __init__(self, *, transport: _Transport, phases: list[_Phase], reduce: Callable[..., torch.Tensor] | None,
                 before: Callable[[], object] | None = None, between: Callable[[], object] | None = None,
                 after: Callable[[], object] | None = None):
        self._transport, self._phases, self._reduce = transport, phases, reduce or _no_reduce
        self._before, self._between, self._after = before, between, after
        for phase in phases:
            phase.exchanges = [[transport.prepare(piece.send, piece.recv, tag) for tag, piece in enumerate(step)]
                               for step in phase.steps]
        self.pieces = len(phases[0].steps[0]) if phases else None  # K, pieces in flight per step
        self.bytes_sent = 0

    def __call__(self) -> None:
        self._transport.bytes_sent = 0
        if self._before:
            self._before()
        for index, phase in enumerate(self._phases):
            if index and self._between:
                self._between()
            self._run_phase(phase)
        if self._after:
            self._after()
        self.bytes_sent = self._transport.bytes_sent

    def _run_phase(self, phase: _Phase) -> None:
        start, reduce, steps, exchanges = self._transport.start, self._reduce, phase.steps, phase.exchanges
        pieces = len(steps[0])
        sends: list[list] = [[] for _ in range(pieces)]  # every k is set by the first step's start, below
        recvs: list[list] = [[] for _ in range(pieces)]
        previous_sends: list = [[] for _ in range(pieces)]
        unwaited_sends: list = []  # waited once, at the end of the phase (a gloo send waited twice blocks forever)
        for k in range(pieces):
            sends[k], recvs[k] = start(exchanges[0][k])
        for step_index, step in enumerate(steps):
            following = exchanges[step_index + 1] if step_index + 1 < len(steps) else None
            for k, piece in enumerate(step):
                for work in recvs[k]:
                    work.wait()
                if phase.rewrites_sent:
                    for work in previous_sends[k]:  # the scratch piece written now left one step ago
                        work.wait()
                    previous_sends[k] = sends[k]
                else:
                    unwaited_sends.extend(sends[k])
                if piece.into is not None:
                    reduce(piece.own, piece.recv, out=piece.into)
                if following is not None:
                    sends[k], recvs[k] = start(following[k])
        for works in (*previous_sends, unwaited_sends):
            for work in works:
                work.wait()


class _Spares:
    """Two step-alternating spare buffers shaped like `like`, each allocated when a step first uses it: at 2 ranks
    a reduce-scatter uses one landing buffer and no scratch, and on a GPU an allocation counts whether touched or
    not. Every step is prepared when the runner is built, so nothing is allocated in the timed call."""

    def __init__(self, like: torch.Tensor):
        self._like = like
        self._made: dict[int, torch.Tensor] = {}

    def __getitem__(self, index: int) -> torch.Tensor:
        if index not in self._made:
            self._made[index] = torch.empty_like(self._like)
        return self._made[index]


def _reduce_phase(*, chunk_of: Callable[[int], torch.Tensor], rank: int, world: int, pieces: int,
                  scratch: _Spares | None, final: torch.Tensor, recv_space: _Spares) -> _Phase:
    """Reduce-scatter steps ending with the reduction of chunk `rank` in `final`.

    Step s sends chunk (r−s−1) (this rank's input at s = 0, else the partial sum it made in step s−1) and receives
    the peer's partial sum of chunk (r−s−2), reduced with its own input of that chunk into scratch[(s+1) % 2] (or,
    with scratch None, in place into the chunk itself), and into `final` at the last step.
    """
    steps, made = [], None
    for step in range(world - 1):
        sent = chunk_of((rank - step - 1) % world) if made is None else made
        own = chunk_of((rank - step - 2) % world)
        if step == world - 2:
            into = final
        else:
            into = own if scratch is None else scratch[(step + 1) % 2][: own.numel()]
        landing = recv_space[step % 2][: own.numel()]
        steps.append([_Piece(send, recv, own_piece, into_piece) for send, recv, own_piece, into_piece in zip(
            _split(sent, pieces), _split(landing, pieces), _split(own, pieces), _split(into, pieces))])
        made = into
    return _Phase(steps, rewrites_sent=scratch is not None)


def _gather_phase(*, chunk_of: Callable[[int], torch.Tensor], rank: int, world: int, pieces: int) -> _Phase:
    """All-gather steps: step s forwards chunk (r−s) and receives chunk (r−s−1) straight into its place."""
    return _Phase([[_Piece(send, recv) for send, recv in zip(_split(chunk_of((rank - step) % world), pieces),
                                                              _split(chunk_of((rank - step - 1) % world), pieces))]
                   for step in range(world - 1)], rewrites_sent=False)


def _pieces_for(ring_chunks: int | None, chunk: torch.Tensor) -> int:
    pieces = ring_chunks if ring_chunks is not None else default_pieces(chunk.nbytes)
    return max(1, min(pieces, chunk.numel()))


def _average(chunk: torch.Tensor, world: int) -> Callable[[], object]:
    if chunk.dtype.is_floating_point:
        return lambda: chunk.div_(world)
    return lambda: chunk.div_(world, rounding_mode="floor")


def reduce_scatter(send: torch.Tensor, recv: torch.Tensor, *, rank: int, world: int, batched: bool, op: str,
                   ring_chunks: int | None) -> RingRunner:
    """recv ← chunk `rank` of the reduction of every rank's send; send is left as it was."""
    transport = _Transport(rank=rank, world=world, batched=batched)
    if world == 1:
        return RingRunner(transport=transport, phases=[], reduce=None,
                          before=None if recv.data_ptr() == send.data_ptr() else lambda: recv.copy_(send))
    # double-buffered partial sums and landing space, allocated here, never in the timed call
    scratch, landing = _Spares(recv), _Spares(recv)
    phase = _reduce_phase(chunk_of=_split(send, world).__getitem__, rank=rank, world=world,
                          pieces=_pieces_for(ring_chunks, recv), scratch=scratch, final=recv, recv_space=landing)
    return RingRunner(transport=transport, phases=[phase], reduce=_REDUCE[op],
                      after=_average(recv, world) if op == "avg" else None)


def all_gather(send: torch.Tensor, recv: torch.Tensor, *, rank: int, world: int, batched: bool,
               ring_chunks: int | None) -> RingRunner:
    """recv ← every rank's send, in rank order."""
    chunks = _split(recv, world)
    own = chunks[rank]
    copy_own = None if own.data_ptr() == send.data_ptr() else (lambda: own.copy_(send))
    transport = _Transport(rank=rank, world=world, batched=batched)
    phases = [] if world == 1 else [
        _gather_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=_pieces_for(ring_chunks, send))]
    return RingRunner(transport=transport, phases=phases, reduce=None, before=copy_own)


def all_reduce(buffer: torch.Tensor, *, rank: int, world: int, batched: bool, op: str,
               ring_chunks: int | None) -> RingRunner:
    """buffer ← the reduction of every rank's buffer, in place: reduce-scatter, then all-gather, over n chunks
    whose sizes differ by at most one element when the count does not divide by n (some may be empty)."""
    transport = _Transport(rank=rank, world=world, batched=batched)
    if world == 1:
        return RingRunner(transport=transport, phases=[], reduce=None)
    chunks = _split(buffer, world)
    largest = chunks[0]
    pieces = _pieces_for(ring_chunks, largest)
    landing = _Spares(largest)
    phases = [_reduce_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=pieces, scratch=None,
                            final=chunks[rank], recv_space=landing),
              _gather_phase(chunk_of=chunks.__getitem__, rank=rank, world=world, pieces=pieces)]
    # avg: divide the own chunk between the phases, so every rank receives finished averages
    return RingRunner(transport=transport, phases=phases, reduce=_REDUCE[op],
                      between=_average(chunks[rank], world) if op == "avg" else None)
