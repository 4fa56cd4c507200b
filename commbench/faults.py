"""Test-only fault injection, so tests can prove that wrong results, dead ranks and hung ranks are caught.

COMMBENCH_FAULT="KIND:RANK:POINT" makes rank RANK misbehave at point index POINT (a training sweep: configuration
index; `*`: every point). KIND is
  wrong  add 1 to one output element before the check (the check must report it; training: one parameter),
  kill   SIGKILL itself before the point (the sweep must end as failed, keeping earlier rows),
  hang   sleep forever before the point (the sweep must end within --timeout),
  leak   training only: keep the configuration's model and optimizer alive after it (the next configuration's
         mem_carryover_bytes must show it),
  zero   report every timed sample of the point as 0 s (rank 0 builds the row, so use rank 0): a time at or below
         the timer's resolution must never be divided by,
  skew   leave every barrier of the point's warm-up and timed loop SKEW_S late: barrier-exit skew made larger
         than this machine's noise, so a test can show what each timing mode does with it (a per-iteration sample
         holds it whole, a batch spreads it over its calls; on CUDA behind a spin the ranks' meet on the device
         absorbs it, as it does the spins' own skew: measure/timers.CudaTimer),
  abort  SIGABRT itself on the way out, after the run (or, with a process per configuration, configuration POINT)
         stored everything: a rank dying in teardown must not fail a complete run.
COMMBENCH_SLOWDOWN_PCT=P makes every timed collective call P percent slower (a busy wait inside the timed interval
of P percent of the rank's fastest call so far), so the regression gate can be shown to catch a slowdown.
COMMBENCH_SLOW_NODE="NODE:P" makes every send of the ranks on node NODE (their node name, commbench/cluster/nodes.py)
P percent slower, and COMMBENCH_SLOW_LINK="NODE_A,NODE_B:P" every send between those two nodes (either way): a sleep
of that share of the transfer's own time inside the timed interval, in `commbench hunt` and `commbench p2p`. A sleep,
not a busy wait: on a machine whose cores all run ranks, a spinning rank would slow the other pairs of its round too.
COMMBENCH_STALL_NODE="NODE:P:MS" delays P percent of the exchanges of the ranks on node NODE by MS milliseconds (a
sleep after the transfer, drawn at random per exchange): a node that is slow sometimes (throttling, retransmits, a
noisy neighbour), which a median or a 10th percentile does not see.
On CUDA tensors these four delay the device, not the host: a call returns once its work is queued, so a host wait
would slow nothing the CUDA events time. After the call, a spin kernel
(commbench.measure.spin_kernel.spin_device) on the current
stream holds the stream for the delay; a share of the call's own time is a share of its device time, measured by CUDA
events around an earlier call (the latest whose events have completed, so the host never waits for it; the first call
has none and is not delayed, which the warm-up absorbs).
"""

import math
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, get_args

import torch

from commbench.measure.spin_kernel import calibrate_spin, can_spin, spin_device

ENV_VAR = "COMMBENCH_FAULT"
SLOWDOWN_ENV_VAR = "COMMBENCH_SLOWDOWN_PCT"
SLOW_NODE_ENV_VAR = "COMMBENCH_SLOW_NODE"
SLOW_LINK_ENV_VAR = "COMMBENCH_SLOW_LINK"
STALL_NODE_ENV_VAR = "COMMBENCH_STALL_NODE"
FaultKind = Literal["wrong", "kill", "hang", "leak", "abort", "zero", "skew"]
"""What a COMMBENCH_FAULT does (this module's docstring says each)."""
_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
EVERY_POINT = -1
SKEW_S = 0.02
_LEAKED: list[object] = []  # what a "leak" fault keeps alive
R = TypeVar("R")
"""What a timed call returns."""


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    rank: int
    point: int

    def applies(self, kind: FaultKind, rank: int, point: int) -> bool:
        return (self.kind, self.rank) == (kind, rank) and self.point in (point, EVERY_POINT)


def from_env() -> Fault | None:
    text = os.environ.get(ENV_VAR)
    if not text:
        return None
    kind, rank, point = text.split(":")
    known = next((name for name in _KINDS if name == kind), None)
    if known is None:
        raise ValueError(f"{ENV_VAR}={text!r}: kind must be one of {_KINDS}")
    return Fault(known, int(rank), EVERY_POINT if point == "*" else int(point))


def before_point(fault: Fault | None, *, rank: int, point: int) -> None:
    if fault is None:
        return
    if fault.applies("kill", rank, point):
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.applies("hang", rank, point):
        while True:
            time.sleep(3600)


def on_exit(fault: Fault | None, *, rank: int, point: int | None = None) -> None:
    """Called by a launched rank after its run returned; point is the configuration of a --only launch."""
    if fault is not None and fault.kind == "abort" and fault.rank == rank and point in (None, fault.point):
        os.abort()


def corrupt_output(fault: Fault | None, output: torch.Tensor, *, rank: int, point: int) -> None:
    if fault is not None and fault.applies("wrong", rank, point):
        output.view(-1)[0] += 1


def zero_times(fault: Fault | None, samples_s: list[float], *, rank: int, point: int) -> list[float]:
    if fault is not None and fault.applies("zero", rank, point):
        return [0.0] * len(samples_s)
    return samples_s


def skewed(fault: Fault | None, barrier: Callable[[], None], *, rank: int, point: int) -> Callable[[], None]:
    """The barrier the timer waits on, or (skew fault) that barrier followed by SKEW_S of sleep on this rank."""
    if fault is None or not fault.applies("skew", rank, point):
        return barrier

    def late_barrier() -> None:
        barrier()
        time.sleep(SKEW_S)

    return late_barrier


def keep_alive(fault: Fault | None, obj: object, *, rank: int, point: int) -> None:
    if fault is not None and fault.applies("leak", rank, point):
        _LEAKED.append(obj)


def slowed(run: Callable[[], R], device: torch.device | str) -> Callable[[], R]:
    """run itself, or (with COMMBENCH_SLOWDOWN_PCT set) run followed by a wait of that share of its duration: a busy
    wait on CPU, a spin of the stream on CUDA (`device`: where the call's tensors are).

    The share is of the fastest call this rank has made so far, not of this call: a call's time includes waiting for
    a peer still in its own wait, so a share of each call's time would hand the skew back multiplied (×5 at 400 %)
    and make the slowdown depend on the ranks' first skew instead of on P."""
    percent = float(os.environ.get(SLOWDOWN_ENV_VAR) or 0)
    if percent <= 0:
        return run
    if _on_cuda(device):
        return _DeviceShare(run, percent / 100, SLOWDOWN_ENV_VAR)

    fastest_s = math.inf

    def slow_run() -> R:
        nonlocal fastest_s
        start = time.perf_counter()
        result = run()
        fastest_s = min(fastest_s, time.perf_counter() - start)
        until = time.perf_counter() + fastest_s * percent / 100
        while time.perf_counter() < until:
            pass
        return result

    return slow_run


def send_slowdown(my_node: str, peer_node: str | None) -> float:
    """The share (1.0 = 100 %) by which this rank's sends to a rank on peer_node (None: a collective within this
    rank's own node) are slowed by COMMBENCH_SLOW_NODE / COMMBENCH_SLOW_LINK; 0.0 without them."""
    share = 0.0
    node = os.environ.get(SLOW_NODE_ENV_VAR)
    if node:
        name, percent = _named_percent(SLOW_NODE_ENV_VAR, node)
        if name == my_node:
            share += percent / 100
    link = os.environ.get(SLOW_LINK_ENV_VAR)
    if link and peer_node is not None:
        names, percent = _named_percent(SLOW_LINK_ENV_VAR, link)
        ends = names.split(",")
        if len(ends) != 2:
            raise ValueError(f"{SLOW_LINK_ENV_VAR}={link!r}: give NODE_A,NODE_B:PERCENT")
        if {my_node, peer_node} == set(ends) and my_node != peer_node:
            share += percent / 100
    return share


def _named_percent(variable: str, text: str) -> tuple[str, float]:
    name, _, percent = text.rpartition(":")
    try:
        value = float(percent)
    except ValueError:
        value = -1.0
    if not name or value <= 0:
        raise ValueError(f"{variable}={text!r}: give NAME:PERCENT with a percentage above 0")
    return name, value


def slowed_by(run: Callable[[], R], share: float, device: torch.device | str) -> Callable[[], R]:
    """run itself, or run followed by a wait of `share` of its own duration (the slow-node and slow-link faults): a
    sleep on CPU, a spin of the stream on CUDA (`device`: where the transfer's tensors are)."""
    if share <= 0:
        return run
    if _on_cuda(device):
        return _DeviceShare(run, share, f"{SLOW_NODE_ENV_VAR} / {SLOW_LINK_ENV_VAR}")

    def slow_run() -> R:
        start = time.perf_counter()
        result = run()
        time.sleep((time.perf_counter() - start) * share)
        return result

    return slow_run


@dataclass(frozen=True)
class Stall:
    percent: float
    """Share of exchanges delayed, in percent."""
    seconds: float


def node_stall(my_node: str) -> Stall | None:
    """COMMBENCH_STALL_NODE's stall when it names this rank's node; None otherwise."""
    text = os.environ.get(STALL_NODE_ENV_VAR)
    if not text:
        return None
    node, _, rest = text.partition(":")
    percent, _, milliseconds = rest.partition(":")
    try:
        stall = Stall(float(percent), float(milliseconds) / 1000)
    except ValueError:
        stall = Stall(-1.0, -1.0)
    if not node or not 0 < stall.percent <= 100 or stall.seconds <= 0:
        raise ValueError(f"{STALL_NODE_ENV_VAR}={text!r}: give NODE:PERCENT:MS, e.g. n2:10:50 (10 % of n2's exchanges "
                         "delayed by 50 ms)")
    return stall if node == my_node else None


def stalled(run: Callable[[], R], stall: Stall | None, device: torch.device | str) -> Callable[[], R]:
    """run itself, or run followed, in stall.percent of the calls (drawn at random), by stall.seconds of delay: a
    sleep on CPU, a spin of the stream on CUDA (`device`: where the transfer's tensors are)."""
    if stall is None:
        return run
    draw = random.Random()
    on_cuda = _on_cuda(device)
    if on_cuda:
        _ready_to_spin(STALL_NODE_ENV_VAR)

    def stalling_run() -> R:
        result = run()
        if draw.random() * 100 < stall.percent:
            if on_cuda:
                spin_device(stall.seconds)
            else:
                time.sleep(stall.seconds)
        return result

    return stalling_run


def _on_cuda(device: torch.device | str) -> bool:
    return torch.device(device).type == "cuda"


def _ready_to_spin(variable: str) -> None:
    """Calibrate the spin before anything is timed (calibrating waits for the device); refuse a fault that could not
    delay anything (a torch without the spin kernel)."""
    if not can_spin():
        raise RuntimeError(f"{variable} on CUDA needs torch.cuda._sleep (the spin kernel), which this torch lacks: "
                           "run the fault on CPU tensors")
    calibrate_spin()


class _DeviceShare(Generic[R]):
    """run, then a spin of the current stream for `share` of run's own device time. That time comes from CUDA events
    around earlier calls: the fastest of those whose end event has completed, read without waiting (in
    per-iteration timing each iteration starts on an idle stream, so the previous call is read). While a CUDA graph
    is captured no event is recorded or read, and the spin is captured at the time known then."""

    def __init__(self, run: Callable[[], R], share: float, variable: str) -> None:
        _ready_to_spin(variable)
        self._run, self._share = run, share
        self._call_s = 0.0
        # (start, end) events of a call whose time has not been read yet
        self._pending: tuple[torch.cuda.Event, torch.cuda.Event] | None = None

    def __call__(self) -> R:
        stream = torch.cuda.current_stream()
        capturing = torch.cuda.is_current_stream_capturing()
        if self._pending is not None and not capturing and self._pending[1].query():
            start, end = self._pending
            # the fastest call so far: a call's device time includes waiting for peers (see `slowed`)
            self._call_s = min(self._call_s or math.inf, start.elapsed_time(end) / 1e3)
            self._pending = None
        record = self._pending is None and not capturing
        if record:
            start = torch.cuda.Event(enable_timing=True)
            start.record(stream)
        result = self._run()
        if record:
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
            self._pending = (start, end)
        spin_device(self._call_s * self._share)
        return result
