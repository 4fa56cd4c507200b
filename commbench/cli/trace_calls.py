"""How `commbench trace analyze` shows collective calls: every call (--calls), the size histogram per kind, and the
straggler view across ranks."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from commbench.units import format_bytes

if TYPE_CHECKING:
    from commbench.profiling.collective_calls import Call


def _size(value: float | None) -> str:
    return "?" if value is None else format_bytes(int(value))


def _gbps(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.3f}"


def call_document(call: Call) -> dict[str, object]:
    message = call.message
    return {"rank": call.rank, "index": call.index, "step": call.step, "kind": call.kind, "trace_kind": call.raw_kind,
            "bytes": message.bytes if message else None, "elements": message.elements if message else None,
            "dtype": message.dtype if message else None, "group": call.group,
            "group_ranks": list(call.group_ranks) if call.group_ranks else None, "group_size": call.group_size,
            "start_us": call.start_us, "duration_us": call.duration_us, "algbw_gbps": call.algbw_gbps,
            "busbw_gbps": call.busbw_gbps, "sequence": call.sequence}


def describe_calls(calls: Iterable[Call]) -> list[str]:
    lines = ["calls (busbw with nccl-tests' factor at the call's group size; size = the larger of input and output):",
             f"  {'rank':>4} {'step':>5} {'kind':<15} {'size':>12} {'dtype':>9} {'group':>6} {'ranks':>5} "
             f"{'duration (us)':>14} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"]
    for call in calls:
        message = call.message
        lines.append(f"  {'?' if call.rank is None else call.rank:>4} {'-' if call.step is None else call.step:>5} "
                     f"{call.kind:<15} {_size(message.bytes if message else None):>12} "
                     f"{message.dtype if message else '?':>9} {call.group or '-':>6} {call.group_size or '?':>5} "
                     f"{call.duration_us:>14.1f} {_gbps(call.algbw_gbps):>13} {_gbps(call.busbw_gbps):>13}")
    return lines


def describe_histogram(rows: list[dict]) -> list[str]:
    if not rows:
        return ["collective calls: none found in the trace(s)"]
    lines = ["collective calls by kind and size (power-of-two buckets; busbw percentiles over the bucket's calls):",
             f"  {'kind':<15} {'size from':>12} {'below':>12} {'calls':>6} {'p50 time (us)':>14} "
             f"{'p50 busbw':>10} {'p90 busbw':>10} {'p99 busbw':>10}  (GB/s)"]
    for row in rows:
        lines.append(f"  {row['kind']:<15} {_size(row['size_from_bytes']):>12} {_size(row['size_below_bytes']):>12} "
                     f"{row['calls']:>6} {row['duration_us_p50']:>14.1f} {_gbps(row['busbw_gbps_p50']):>10} "
                     f"{_gbps(row['busbw_gbps_p90']):>10} {_gbps(row['busbw_gbps_p99']):>10}")
    return lines


def describe_stragglers(view: dict) -> list[str]:
    lines = ["stragglers: at each call matched on every rank (same step, group, kind, size and sequence), the rank "
             "that arrived last (its kernel or gloo span started last) and by how much after the one before it"]
    if view["note"]:
        return lines + [f"  {view['note']}"]
    for share in view["ranks"]:
        lines.append(f"  rank {share['rank']}: last in {share['last']} of {len(view['matched'])} matched calls "
                     f"({share['share_pct']:.0f} %, fair share {view['fair_share_pct']:.0f} %; binomial p "
                     f"{share['p_value']:.3g}), {share['late_by_us_total']:.0f} us late in total")
    named = ", ".join(map(str, view["stragglers"]))
    lines.append(f"  straggler: rank {named} (last far more often than 1/N, p < 0.01)" if named else
                 "  no straggler: no rank is last significantly more often than 1/N (p < 0.01)")
    if view["unmatched"]:
        lines.append(f"  {view['unmatched']} call(s) without a counterpart on every rank (not matched)")
    return lines
