"""Interval arithmetic on numpy arrays of starts and ends (µs), with Holistic Trace Analysis' conventions."""

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union as disjoint sorted intervals: an interval joins the group before it unless it starts after every
    end so far (HTA's merge_kernel_intervals, kept exactly so that the figures agree with HTA's)."""
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    previous_max_end = np.maximum.accumulate(np.concatenate(([-np.inf], ends[:-1])))
    group = np.cumsum(starts > previous_max_end)
    boundaries = np.flatnonzero(np.diff(group)) + 1
    group_starts = starts[np.concatenate(([0], boundaries))]
    group_ends = np.maximum.reduceat(ends, np.concatenate(([0], boundaries)))
    return group_starts, group_ends


def total(starts: np.ndarray, ends: np.ndarray) -> float:
    return float(np.sum(ends - starts))


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """|A ∩ B| for two merged (disjoint) interval sets: sweep their boundaries, count time where both are open."""
    a_starts, a_ends = a
    b_starts, b_ends = b
    if len(a_starts) == 0 or len(b_starts) == 0:
        return 0.0
    times = np.concatenate((a_starts, a_ends, b_starts, b_ends))
    deltas = np.concatenate((np.ones(len(a_starts)), -np.ones(len(a_ends)),
                             np.full(len(b_starts), 2.0), np.full(len(b_ends), -2.0)))
    order = np.argsort(times, kind="stable")
    times, running = times[order], np.cumsum(deltas[order])
    both_open = running[:-1] == 3
    return float(np.sum((times[1:] - times[:-1])[both_open]))
