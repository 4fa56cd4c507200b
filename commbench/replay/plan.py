"""From Kineto traces to the calls a replay runs, in the launching process (no torch).

Each trace gives its rank's collective calls (profiling/collective_calls.py) in one ProfilerStep (--step; by default
the first step every trace has) or the whole trace. The ranks must agree call by call: the same kind, size and dtype
in the same order, or the replay could not pair them up. Each call becomes commbench's layout of that collective at
the job's world size, from the message the trace records: an all-reduce or broadcast of the same elements, an
all-gather / reduce-scatter / all-to-all of the same per-rank part. A call is on the whole job when its group's size
("Group size"; Kineto cuts the rank list it also writes to 30 ranks) is the traced world size. Calls commbench cannot
replay (send/recv, reduce, gather, scatter, a subgroup, a dtype it does not run) are listed, not silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING

from commbench.errors import CommbenchError
from commbench.names import DTYPE_BYTES, DTYPES

if TYPE_CHECKING:
    from commbench.profiling.collective_calls import Call

REPLAYABLE = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all")
_PER_RANK = {"all_gather", "reduce_scatter", "all_to_all"}


@dataclass(frozen=True)
class Plan:
    calls: tuple[dict, ...]
    """Per replayed call, in order: kind, dtype, elements (per rank for per-rank collectives), bytes (nccl-tests'
    size at the job's world size), traced_us (median over the traced ranks), gap_before_us."""
    skipped: tuple[str, ...]
    trace_world: int
    step: int | None
    traced_span_us: float
    """First call's start to the last call's end, median over the traced ranks."""


def load_calls(paths: Iterable[str | Path]) -> tuple[dict[str, list[Call]], int | None]:
    """Each trace's calls, and the world size the traces were recorded at (distributedInfo), where they say."""
    from commbench import profiling

    analysis = profiling.analyze(paths)
    seen: dict[int, str] = {}
    for trace in analysis.traces:
        if trace.rank is not None and trace.rank in seen:
            raise CommbenchError(f"{seen[trace.rank]} and {trace.path} both hold rank {trace.rank}: a replay takes "
                                 "one job's step, one trace per rank; pass one configuration's traces (e.g. "
                                 "traces/rank*-ddp-config000.json.gz of a sweep)")
        if trace.rank is not None:
            seen[trace.rank] = trace.path
    return analysis.calls, analysis.world_size


def plan(calls_by_trace: dict[str, list], *, step: int | None, world: int, scale_world: int | None,
         trace_world: int | None) -> Plan:
    chosen_step = _step(calls_by_trace, step)
    per_rank = [[call for call in calls if chosen_step is None or call.step == chosen_step]
                for calls in calls_by_trace.values()]
    if not any(per_rank):
        raise CommbenchError("the traces hold no collective call" + (f" in step {chosen_step}" if chosen_step
                                                                        is not None else "")
                             + "; record the step with torch.profiler (record_shapes=True on CPU), or pass --step")
    _check_ranks_agree(list(calls_by_trace), per_rank)
    traced_world = trace_world or len(calls_by_trace)
    if traced_world != world and scale_world is None:
        raise CommbenchError(f"the traces were recorded at {traced_world} ranks and this job has {world}; run the "
                             f"replay at {traced_world} ranks (--nproc {traced_world}), or pass --scale-world {world} "
                             "to replay every group on this job's ranks")
    if scale_world is not None and scale_world != world:
        raise CommbenchError(f"--scale-world {scale_world} but this job has {world} ranks; pass --scale-world "
                             f"{world}")
    reference = per_rank[0]
    calls, skipped = [], []
    for position, call in enumerate(reference):
        why = _why_not(call, traced_world)
        if why:
            skipped.append(f"{call.kind} {_size(call)} ({why})")
            continue
        traced = [calls_[position].duration_us for calls_ in per_rank]
        gaps = [calls_[position].start_us - (calls_[position - 1].start_us + calls_[position - 1].duration_us)
                if position else 0.0 for calls_ in per_rank]
        group = call.group_size or traced_world
        per_rank_elements = call.message.elements // group if call.kind in _PER_RANK else call.message.elements
        total = per_rank_elements * (world if call.kind in _PER_RANK else 1)
        calls.append({"kind": call.kind, "dtype": call.message.dtype, "elements": per_rank_elements,
                      "bytes": total * DTYPE_BYTES[call.message.dtype], "traced_bytes": call.message.bytes,
                      "traced_us": median(traced), "gap_before_us": max(0.0, median(gaps))})
    # gloo's threads can start two queued calls in either order: the span is from the earliest start to the last end
    spans = [max(call.start_us + call.duration_us for call in calls_) - min(call.start_us for call in calls_)
             for calls_ in per_rank if calls_]
    return Plan(tuple(calls), tuple(skipped), traced_world, chosen_step, median(spans))


def _step(calls_by_trace: dict[str, list], step: int | None) -> int | None:
    steps = [sorted({call.step for call in calls if call.step is not None}) for calls in calls_by_trace.values()]
    common = sorted(set.intersection(*map(set, steps))) if all(steps) else []
    if step is not None:
        if step not in common:
            raise CommbenchError(f"--step {step} is not a ProfilerStep of every trace (they share "
                                 f"{', '.join(map(str, common)) or 'none'}); pass one of those")
        return step
    return common[0] if common else None


def _check_ranks_agree(paths: list[str], per_rank: list[list]) -> None:
    first = [(call.kind, _size(call)) for call in per_rank[0]]
    for path, calls in zip(paths[1:], per_rank[1:]):
        other = [(call.kind, _size(call)) for call in calls]
        if other != first:
            where = next((index for index, (a, b) in enumerate(zip(first, other)) if a != b), min(len(first),
                                                                                                   len(other)))
            mine = f"{first[where][0]} {first[where][1]}" if where < len(first) else "nothing"
            theirs = f"{other[where][0]} {other[where][1]}" if where < len(other) else "nothing"
            raise CommbenchError(f"the ranks' traces disagree at call {where + 1}: {paths[0]} has {mine}, {path} "
                                 f"has {theirs}; pass the traces of one job and one step (--step)")


def _size(call: Call) -> str:
    return "?" if call.message is None else f"{call.message.bytes} B {call.message.dtype}"


def _why_not(call: Call, traced_world: int) -> str:
    if call.kind not in REPLAYABLE:
        return f"commbench replays {', '.join(REPLAYABLE)}"
    if call.message is None:
        return "the trace records no size"
    if call.message.dtype not in DTYPES:
        return f"dtype {call.message.dtype}: commbench runs {', '.join(DTYPES)}"
    if call.group_ranks_cut and call.group_size is None:
        return "the trace cuts the group's rank list and records no group size, so whether it is a subgroup is unknown"
    if call.group_size is not None and call.group_size != traced_world:
        return f"a subgroup of {call.group_size} ranks"
    return ""
