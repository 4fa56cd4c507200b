"""Skew: the start-time spread across ranks of the same collective call, per point.

The same call is the k-th call of one kind, message size and dtype on each rank of one point (the point's traces,
profiling/trace_points.py). Matching by kind and order alone paired different calls: a folder of a 2-size sweep
held rank 0's 1 MiB point and rank 1's 4 MiB one, and their "skew" was the time between the two points. A call with
no counterpart of the same kind, size and dtype on every rank of its point counts as unmatched, never as matched to
another size. Sizes come from the trace (NCCL kernels and record_param_comms record them); gloo's spans record none,
so in a sweep's trace a call of the point's own collective takes the point's size and dtype from the file name, and
any other call stays of unknown size (matched by kind and order within its point only). Spreads compare the ranks'
clocks: they mean something on one host or on synchronised hosts.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from commbench.names import trace_dtype
from commbench.profiling.overlap import classify, event_kinds, launch_messages, message_of
from commbench.profiling.trace_file import TraceEvents
from commbench.profiling.trace_points import PointKeys, TraceGroup, group_by_point, trace_rank

SizeFrom = Literal["trace", "point"]
"""Where a call's size came from: the trace's own arguments, or the point's file name (gloo's spans record none)."""
SIZE_FROM_TRACE: SizeFrom = "trace"
SIZE_FROM_POINT: SizeFrom = "point"

POINT_RULE = "the k-th call of one kind, size and dtype on each rank of this point (its traces, one per rank)"
UNPLACED_RULE = ("these files are not named rank<R>-<point> as commbench names traces, so they cannot be grouped "
                 "into points: the k-th call of one kind, size and dtype in each file is matched against the other "
                 "files")


@dataclass(frozen=True)
class CallKey:
    kind: str
    bytes: int | None  # None: the trace records no size for this call
    dtype: str | None
    size_from: SizeFrom | None = field(default=None, compare=False)  # SIZE_FROM_TRACE, SIZE_FROM_POINT or None: where
    # the size came from, which says nothing about which call it is


def _letters(name: str) -> str:
    return "".join(char for char in name.lower() if char.isalpha())


def calls(trace: TraceEvents, point_keys: PointKeys) -> list[tuple[CallKey, float]]:
    """Each communication event of the trace, in start order: its key and start (µs)."""
    classified = classify(trace)
    kinds = event_kinds(trace, classified)
    comm = np.flatnonzero(classified.comm)
    comm = comm[np.argsort(trace.ts[comm], kind="stable")]
    own = {int(i): message for i in comm if (message := message_of(trace.args[i])) is not None}
    launched = launch_messages(trace, [i for i in comm if int(i) not in own]) if classified.device == "gpu" else {}
    collective = point_keys.get("collective")
    found = []
    for i in comm:
        kind = kinds.kind[i]
        message = own.get(int(i)) or launched.get(int(i))
        if message is not None:
            key = CallKey(kind, message[0], trace_dtype(message[1]), SIZE_FROM_TRACE)
        elif collective is not None and _letters(kind) == _letters(collective):
            key = CallKey(kind, point_keys["size_bytes"], point_keys["dtype"], SIZE_FROM_POINT)
        else:
            key = CallKey(kind, None, None, None)
        found.append((key, float(trace.ts[i])))
    return found


def point_skew(group: TraceGroup) -> tuple[dict, list[dict]]:
    """The point's description and its skew entries, one per kind × size × dtype of its calls."""
    ranks = [trace_rank(trace) for trace in group.traces]
    point = {"point": group.index, "name": group.name, "label": group.label(), "folder": group.folder,
             "keys": group.keys, "ranks": ranks, "traces": [trace.path for trace in group.traces],
             "matched_by": POINT_RULE if group.is_point else UNPLACED_RULE, "note": None}
    if len(group.traces) < 2:
        point["note"] = "one trace only: nothing to match it against"
        return point, []
    seen: dict[int, str] = {}
    for rank, trace in zip(ranks, group.traces):
        if rank is not None and rank in seen:
            point["note"] = (f"{seen[rank]} and {trace.path} both hold rank {rank}: they come from different jobs "
                             "or runs, whose calls are not the same; analyse one job's traces at a time")
            return point, []
        if rank is not None:
            seen[rank] = trace.path
    # starts[key][k][participant] = start of the k-th call of that key on that participant (trace)
    starts: dict[CallKey, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for participant, trace in enumerate(group.traces):
        count: dict[CallKey, int] = defaultdict(int)
        for key, start in calls(trace, group.keys):
            starts[key][count[key]][participant] = start
            count[key] += 1
    entries = [_entry(group, ranks, key, by_sequence) for key, by_sequence in
               sorted(starts.items(), key=lambda item: _key_order(item[0]))]
    return point, entries


def _key_order(key: CallKey) -> tuple[str, bool, int, str]:
    return key.kind, key.bytes is not None, key.bytes or 0, key.dtype or ""


def _entry(group: TraceGroup, ranks: list, key: CallKey, by_sequence: dict[int, dict[int, float]]) -> dict:
    participants = len(group.traces)
    spreads = [max(on_rank.values()) - min(on_rank.values()) for on_rank in by_sequence.values()
               if len(on_rank) == participants]
    unmatched = sum(len(on_rank) for on_rank in by_sequence.values() if len(on_rank) < participants)
    calls_per_rank = [sum(participant in on_rank for on_rank in by_sequence.values())
                      for participant in range(participants)]
    return {"point": group.index, "point_name": group.name, "kind": key.kind, "bytes": key.bytes,
            "dtype": key.dtype, "size_from": key.size_from, "ranks": ranks, "calls_per_rank": calls_per_rank,
            "matched": len(spreads), "unmatched": unmatched,
            "skew_us_mean": float(np.mean(spreads)) if spreads else None,
            "skew_us_max": float(np.max(spreads)) if spreads else None}


def summary(points: list[dict], entries: list[dict]) -> dict:
    """Over every point: how many calls matched and did not, their mean spread, and the largest one and where."""
    matched = sum(entry["matched"] for entry in entries)
    with_skew = [entry for entry in entries if entry["matched"]]
    largest = max(with_skew, key=lambda entry: entry["skew_us_max"], default=None)
    return {"points": sum(point["note"] is None for point in points),
            "points_not_matched": sum(point["note"] is not None for point in points),
            "matched": matched, "unmatched": sum(entry["unmatched"] for entry in entries),
            "skew_us_mean": sum(entry["skew_us_mean"] * entry["matched"] for entry in with_skew) / matched
            if matched else None,
            "skew_us_max": largest["skew_us_max"] if largest else None,
            "largest_at": {key: largest[key] for key in ("point", "point_name", "kind", "bytes", "dtype")}
            if largest else None}


def skew_report(traces: list[TraceEvents]) -> dict:
    """skew (entries of every point), skew_points (each point, its ranks and matching rule) and skew_summary."""
    points, entries = [], []
    for group in group_by_point(traces):
        point, found = point_skew(group)
        points.append(point)
        entries.extend(found)
    return {"skew": entries, "skew_points": points, "skew_summary": summary(points, entries)}
