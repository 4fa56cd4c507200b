"""How long the device spins ahead of the host, and how many calls one spin covers: plain arithmetic on measured host
issue times (no torch), so every rule is a table-tested function.

On a GPU the host issues a collective in 15–40 µs (Python, torch, NCCL's enqueue) while a small one runs in a few µs
on the device. Timed by a host clock around back-to-back calls, a call costs the larger of the two, so small sizes
would read the host. A spin kernel queued first keeps the device busy while the host issues a whole segment of calls
behind it; CUDA events after the spin and after the last call then bracket the calls' device time only.

- The spin lasts SPIN_MARGIN × the issue time it covers, within [MIN_SPIN_S, MAX_SPIN_S].
- The issue time is agreed across ranks before timing (the slowest rank's), so every rank computes the same plan.
  The same plan is not the same length on every GPU: each rank calibrated its own spin, and each GPU runs it at its
  own clock, so the spins end 1-2 % apart. The ranks therefore meet on the device after the spin, before the start
  event (a one-element collective on the same stream): no rank's timed calls hold a wait for a slower peer's spin.
- What the spin must cover is what the host issues after launching it: the meet, the start event and the calls. A
  spin is sized from that quantity (the agreed fixed cost plus the calls' issue) and judged by it.
- A segment holds at most as many calls as the stream's launch queue takes without blocking the host; a longer
  batch is timed as several segments (barrier, sync, spin, calls), their device times summed.
- A row is host-bound where the host could not stay ahead of the device: its issue time per call reaches
  HOST_BOUND_SHARE of its time per call, or a spin ended before its segment's last call was issued.
"""

import math
import statistics
from dataclasses import dataclass

SPIN_MARGIN = 2.0
"""The spin lasts this many times the issue time it must cover: room for the ordinary spread of the host's issue
times (a batch's calls are issued as fast as the warm-up's, give or take a page fault or a garbage collection)."""
MIN_SPIN_S = 1e-4
"""The shortest spin: about the host time of issuing one builtin collective from Python."""
MAX_SPIN_S = 0.05
"""The longest spin. A capped spin costs at most 50 ms of wall time per segment; a batch whose issue needs more is
cut into more segments, and a single call whose issue needs more is host-bound (the row says so)."""
LAUNCH_QUEUE_ENTRIES = 512
"""Queue entries (kernel launches, event records, stream waits) one segment may hold. A CUDA stream takes about
1,000 pending launches before cudaLaunchKernel blocks the host until the device drains some (reported on NVIDIA's
forum, "CUDA stream are blocked when launching lots of kernels (>1000)", and Stack Overflow 53970187); half of that
leaves room for what torch and NCCL queue besides. NCCL's work FIFO (NCCL_WORK_FIFO_BYTES, 1 MiB by default,
init.cc) is used only by work that overflows a launch's 4 KiB of kernel arguments, so it fills later.
benchmarks/gpu_probes.py measures the queue on a GPU."""
ENTRY_ISSUE_FLOOR_S = 2e-6
"""The least host time one queue entry costs to issue (a bare cudaLaunchKernel or cudaEventRecord takes 2–5 µs), so
a call issued in t seconds queues at most t / ENTRY_ISSUE_FLOOR_S entries: 25–40 µs for a builtin collective from
Python bounds a segment at 25–40 calls (nccl-tests' default -n 20 fits), a hand-written ring's many groups per call
at a few calls."""
HOST_BOUND_SHARE = 0.8
"""A call is host-bound where its issue time reaches this share of its time: without the spin (in a training step,
in nccl-tests' host-clocked loop) the host would barely, or not, keep ahead of the device."""


def typical_issue_s(issue_s: list[float]) -> float | None:
    """The issue time that sizes a spin: the median of the calls after the first, or the first alone when it is all
    there is; None with no call seen.

    The first call is left out: NCCL (2.22 and later) connects a communicator's peers on first use, inside the first
    call's issue (10 ms to 1 s at scale), and hunt's and p2p's first send to a peer connects that pair; no later call
    pays it. The median, not the longest: one stall in the warm-up (a page fault, the garbage collector) must not make
    every timed call spin for it."""
    later = issue_s[1:] or issue_s
    return statistics.median(later) if later else None


def spin_for(issue_s: float | None) -> float:
    """The spin that covers `issue_s` of host issue: SPIN_MARGIN times it, within [MIN_SPIN_S, MAX_SPIN_S]."""
    if issue_s is None:
        return MIN_SPIN_S
    return min(MAX_SPIN_S, max(MIN_SPIN_S, SPIN_MARGIN * issue_s))


def queue_bound(issue_s_per_unit: float | None) -> int:
    """Units (iterations, or graph replays) one segment may hold before the launch queue could block the host: each
    queue entry costs at least ENTRY_ISSUE_FLOOR_S to issue, so a unit issued in t holds at most t / floor entries."""
    if issue_s_per_unit is None or issue_s_per_unit <= 0:
        return LAUNCH_QUEUE_ENTRIES
    entries = max(1, math.ceil(issue_s_per_unit / ENTRY_ISSUE_FLOOR_S))
    return max(1, LAUNCH_QUEUE_ENTRIES // entries)


@dataclass(frozen=True)
class BatchPlan:
    """How one batch of `units` is issued: segments of at most `per_segment` units, each behind its own spin."""

    units: int
    per_segment: int
    issue_s_per_unit: float | None
    """The agreed issue time the plan rests on (the slowest rank's typical issue time of one unit)."""

    overhead_s: float = 0.0
    """The agreed host time a segment costs besides its units: the spin's launch, the ranks' meet on the device and
    the start event, all issued after the spin was launched and before the first unit."""

    @property
    def segments(self) -> list[int]:
        """The units of each segment, in order: as few segments as per_segment allows, their sizes differing by at
        most one. Even, not full segments then the rest: a lone last unit would carry a whole segment's rank skew
        and fixed cost alone."""
        count = math.ceil(self.units / self.per_segment) if self.units > 0 else 0
        if not count:
            return []
        base, longer = divmod(self.units, count)
        return [base + 1] * longer + [base] * (count - longer)

    def spin_s(self, units: int) -> float:
        """The spin ahead of a segment of `units`: it must outlast what the host issues after launching it."""
        if self.issue_s_per_unit is None:
            return spin_for(None)
        return spin_for(self.overhead_s + self.issue_s_per_unit * units)


def batch_plan(units: int, issue_s_per_unit: float | None, overhead_s: float = 0.0) -> BatchPlan:
    """The plan for a batch of `units` back-to-back units, from the agreed issue time of one unit: as many per segment
    as the launch queue allows (every rank computes the same from the same agreed figure). The queue bound also keeps
    a segment's issue under LAUNCH_QUEUE_ENTRIES × ENTRY_ISSUE_FLOOR_S (about 1 ms), far below the spin's cap; only a
    single unit issued in over MAX_SPIN_S / SPIN_MARGIN outlasts its capped spin, and is host-bound."""
    per_segment = max(1, min(units, queue_bound(issue_s_per_unit)))
    return BatchPlan(units=units, per_segment=per_segment, issue_s_per_unit=issue_s_per_unit, overhead_s=overhead_s)


def is_host_bound(issue_s_per_call: float | None, time_s_per_call: float | None, covered: bool | None) -> bool | None:
    """Whether the host could not stay ahead of the device: a spin ended before its last call was issued, or the
    issue time per call reaches HOST_BOUND_SHARE of the time per call. None where nothing was issued ahead (a
    host-blocking backend: gloo's calls return when done, so its host clock holds the whole call)."""
    if covered is None or issue_s_per_call is None:
        return None
    if not covered:
        return True
    if time_s_per_call is None or not time_s_per_call > 0:
        return False  # a no-op read as 0: no device time to fall behind, and the note says why
    return issue_s_per_call >= HOST_BOUND_SHARE * time_s_per_call


def cover_text(issue_s: list[float], spin_s: list[float], meet: str = "") -> str:
    """timing_method's words on the timed calls' spins: a call is covered when its host issue time (from the spin's
    launch to the call's return) is at most its spin's own duration on the device, measured by CUDA events around
    the spin. The measured duration, not the one asked for: the cycles come from one calibration, and the GPU's
    clock moves with its load and temperature."""
    if not issue_s or len(spin_s) != len(issue_s):
        return ""
    calls = len(issue_s)
    outlasted = sum(issue > spin for issue, spin in zip(issue_s, spin_s))
    spin_ms, issue_ms = statistics.median(spin_s) * 1e3, max(issue_s) * 1e3
    if not outlasted:
        return (f"; a {spin_ms:.2g} ms spin{meet} (measured) covered host issue in all {calls} calls (max "
                f"{issue_ms:.2g} ms)")
    return (f"; host issue outlasted the {spin_ms:.2g} ms spin{meet} (measured) in {outlasted} of {calls} calls (max "
            f"{issue_ms:.2g} ms): their launch latency is in the time")
