"""Per kind of collective, a histogram of its calls' message sizes (power-of-two buckets) with the p50/p90/p99 of
their busbw, over the calls of every trace analysed; calls of unknown size are counted apart."""

import math
from collections import defaultdict

import numpy as np

from commbench.profiling.collective_calls import Call


def size_histogram(calls: list[Call]) -> list[dict]:
    buckets: dict[tuple[str, int | None], list[Call]] = defaultdict(list)
    for call in calls:
        size = call.message.bytes if call.message else None
        bucket = None if size is None else (0 if size == 0 else 1 << (size.bit_length() - 1))
        buckets[(call.kind, bucket)].append(call)
    rows = []
    for (kind, low), members in sorted(buckets.items(), key=lambda item: (item[0][0], item[0][1] is None,
                                                                          item[0][1] or 0)):
        busbw = np.array([call.busbw_gbps for call in members], dtype=float)
        busbw = busbw[np.isfinite(busbw)]
        durations = np.array([call.duration_us for call in members], dtype=float)
        rows.append({"kind": kind, "size_from_bytes": low, "size_below_bytes": None if low is None else max(1, 2 * low),
                     "calls": len(members), "ranks": sorted({call.rank for call in members if call.rank is not None}),
                     "duration_us_p50": float(np.percentile(durations, 50)),
                     **{f"busbw_gbps_p{q}": (float(np.percentile(busbw, q)) if busbw.size else math.nan)
                        for q in (50, 90, 99)}})
    return rows
