"""Exposed communication, two ways, combined across ranks: pure functions over what each rank measured.

The trace figure (how much of a step's communication ran while no computation did) differs from rank to rank: a
collective's span on a rank also holds its wait for the last rank to arrive. One rank's figure picked by its size
(the least exposed rank) is biased by that choice, so rows carry the median over ranks (the typical rank) and the
maximum (the worst), the same ranks the slowest-rank step time is measured over.

The paired figure (step − compute-only baseline, commbench/training/compute_baseline.py) is a cost: the median of
step-by-step differences between a real step and a baseline step taken right after it, so the machine's drift falls on
both halves of every pair.

The tables show the paired figure alone, as the best estimate of what communication costs a step: it is a step-time
difference, the quantity a configuration is chosen by, and it holds what the trace cannot see (copies into and out of
the communication's buffers, and on a machine with few cores the time the communication's threads take from the
computation the trace calls overlapped); it is measured the same way for every implementation, where DDP's no_sync
figure exists for DDP alone and keeps DDP's hooks in its baseline. The trace's figure says why (concurrency), with
--verbose.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

from commbench.names import CPU

if TYPE_CHECKING:
    import pandas as pd


def median_and_max(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    """(median, maximum) of the per-rank values that are numbers; (None, None) when no rank has one."""
    present = [float(value) for value in values if value is not None and not math.isnan(float(value))]
    if not present:
        return None, None
    return statistics.median(present), max(present)


def trace_figures(ranks: list[dict]) -> dict:
    """Row columns from each rank's trace figures (comm_ms, exposed_comm_ms per optimizer step; comm_calls and
    comm_msg_elems, the same on every rank): comm and exposed comm as median and max over ranks, overlap as the
    median of each rank's own overlap."""
    comm_ms, comm_ms_max = median_and_max(rank["comm_ms"] for rank in ranks)
    exposed_ms, exposed_ms_max = median_and_max(rank["exposed_comm_ms"] for rank in ranks)
    overlap_pct, _ = median_and_max(100 * (1 - rank["exposed_comm_ms"] / rank["comm_ms"]) for rank in ranks
                                    if rank["comm_ms"])
    return {"comm_ms": comm_ms, "comm_ms_max": comm_ms_max, "exposed_comm_ms": exposed_ms,
            "exposed_comm_ms_max": exposed_ms_max,
            "overlap_pct": None if overlap_pct is None else round(overlap_pct, 2),
            "comm_calls": ranks[0]["comm_calls"], "comm_msg_elems": ranks[0]["comm_msg_elems"]}


def paired_cost(with_comm_ms: list[float], without_ms: list[float]) -> float | None:
    """The median of the paired differences (each step with communication minus the step without it taken next to
    it); None without pairs."""
    differences = [first - second for first, second in zip(with_comm_ms, without_ms)]
    return statistics.median(differences) if differences else None


FSDP2_GLOO_NOTE = ("FSDP2 over gloo (CPU) unshards synchronously: each all-gather blocks the training thread, so "
                   "prefetch cannot overlap communication here (overlap near 0 %, prefetch depths alike); on GPUs "
                   "(NCCL) the all-gathers run on their own stream and prefetch overlaps them with compute")


EXPOSED_MEANING = ("exposed = step − compute-only step (an unsharded local copy, no communication; the median of "
                   "paired differences): what communication costs the step, the best estimate of the three figures "
                   "commbench records (docs/training.md, Exposed communication): unlike the trace's it holds the "
                   "communication's copies and the cores it takes from computing, and it is measured alike for every "
                   "implementation; below 0 it is noise larger than the cost")
OTHER_FIGURES = "the trace's exposed time and DDP's no_sync Δ are in --verbose and results.csv"
VERBOSE_MEANING = ("trace exp/max = the profiler trace's exposed comm, median over ranks / worst rank (concurrency "
                   "in a few profiled steps, not cost); no_sync Δ = step − the same step under no_sync (DDP only; "
                   "its hooks' copies stay in both halves)")


def table_notes(results: pd.DataFrame, verbose: bool = False) -> list[str]:
    """Footnote lines about exposed communication for the rows in `results` (a DataFrame of training rows): what the
    table's one exposed figure is and why it is the one, where the others are (or, verbose, what they are), FSDP2
    over gloo, and a compute-only baseline that is absent and why."""
    notes = [f"{EXPOSED_MEANING}; {VERBOSE_MEANING if verbose else OTHER_FIGURES}"]
    if "impl" in results and "device" in results and \
            ((results["impl"] == "fsdp2") & (results["device"].astype(str) == CPU)).any():
        notes.append(FSDP2_GLOO_NOTE)
    if "compute_baseline" in results:
        absent = sorted({str(text) for text in results["compute_baseline"].dropna() if str(text).startswith("absent")})
        notes += [f"exposed {text} (the trace's figure, in --verbose, is the one left)" for text in absent]
    return notes
