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
         holds it whole, a batch spreads it over its calls),
  abort  SIGABRT itself on the way out, after the run (or, with a process per configuration, configuration POINT)
         stored everything: a rank dying in teardown must not fail a complete run.
COMMBENCH_SLOWDOWN_PCT=P makes every timed collective call P percent slower (a busy wait inside the timed interval),
so the regression gate can be shown to catch a slowdown.
COMMBENCH_SLOW_NODE="NODE:P" makes every send of the ranks on node NODE (their node name, commbench/cluster/nodes.py)
P percent slower, and COMMBENCH_SLOW_LINK="NODE_A,NODE_B:P" every send between those two nodes (either way): a sleep
of that share of the transfer's own time inside the timed interval, in `commbench hunt` and `commbench p2p`. A sleep,
not a busy wait: on a machine whose cores all run ranks, a spinning rank would slow the other pairs of its round too.
COMMBENCH_STALL_NODE="NODE:P:MS" delays P percent of the exchanges of the ranks on node NODE by MS milliseconds (a
sleep after the transfer, drawn at random per exchange): a node that is slow sometimes (throttling, retransmits, a
noisy neighbour), which a median or a 10th percentile does not see.
"""

import os
import random
import signal
import time
from dataclasses import dataclass

import torch

ENV_VAR = "COMMBENCH_FAULT"
SLOWDOWN_ENV_VAR = "COMMBENCH_SLOWDOWN_PCT"
SLOW_NODE_ENV_VAR = "COMMBENCH_SLOW_NODE"
SLOW_LINK_ENV_VAR = "COMMBENCH_SLOW_LINK"
STALL_NODE_ENV_VAR = "COMMBENCH_STALL_NODE"
_KINDS = ("wrong", "kill", "hang", "leak", "abort", "zero", "skew")
EVERY_POINT = -1
SKEW_S = 0.02
_LEAKED: list = []  # what a "leak" fault keeps alive


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int
    point: int

    def applies(self, kind: str, rank: int, point: int) -> bool:
        return (self.kind, self.rank) == (kind, rank) and self.point in (point, EVERY_POINT)


def from_env() -> Fault | None:
    text = os.environ.get(ENV_VAR)
    if not text:
        return None
    kind, rank, point = text.split(":")
    if kind not in _KINDS:
        raise ValueError(f"{ENV_VAR}={text!r}: kind must be one of {_KINDS}")
    return Fault(kind, int(rank), EVERY_POINT if point == "*" else int(point))


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


def skewed(fault: Fault | None, barrier, *, rank: int, point: int):
    """The barrier the timer waits on, or (skew fault) that barrier followed by SKEW_S of sleep on this rank."""
    if fault is None or not fault.applies("skew", rank, point):
        return barrier

    def late_barrier():
        barrier()
        time.sleep(SKEW_S)

    return late_barrier


def keep_alive(fault: Fault | None, obj, *, rank: int, point: int) -> None:
    if fault is not None and fault.applies("leak", rank, point):
        _LEAKED.append(obj)


def slowed(run):
    """run itself, or (with COMMBENCH_SLOWDOWN_PCT set) run followed by a busy wait of that share of its duration."""
    percent = float(os.environ.get(SLOWDOWN_ENV_VAR) or 0)
    if percent <= 0:
        return run

    def slow_run():
        start = time.perf_counter()
        result = run()
        until = time.perf_counter() + (time.perf_counter() - start) * percent / 100
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


def slowed_by(run, share: float):
    """run itself, or run followed by a sleep of `share` of its own duration (the slow-node and slow-link faults)."""
    if share <= 0:
        return run

    def slow_run():
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


def stalled(run, stall: Stall | None):
    """run itself, or run followed, in stall.percent of the calls (drawn at random), by a sleep of stall.seconds."""
    if stall is None:
        return run
    draw = random.Random()

    def stalling_run():
        result = run()
        if draw.random() * 100 < stall.percent:
            time.sleep(stall.seconds)
        return result

    return stalling_run
