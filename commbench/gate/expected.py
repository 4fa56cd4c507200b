"""The gate against the expectation (`commbench compare --fail-below-expected PCT`): a new row whose busbw is below
PCT % of its expected busbw (commbench expect), at a size where bandwidth dominates its time, fails the gate. The
other rows of a curve (latency-bound sizes) are not judged against a bandwidth ceiling."""

from __future__ import annotations

import math

import pandas as pd

from commbench.errors import CommbenchError
from commbench.gate import sides
from commbench.measure.stats import as_number
from commbench.schema import common

BELOW_EXPECTED = "BELOW EXPECTED"
"""A new row whose busbw is below --fail-below-expected's share of its expected busbw: the gate fails."""
CURVE_KEYS = ("collective", "impl", "backend", common.WORLD_SIZE, "dtype", "op", "inplace", "timing")
"""One busbw curve over sizes: where bandwidth dominates is found per curve (sweep/bandwidth_bound.py)."""


def below_expected(run: sides.Run, percent: float, *, prefix: str = "") -> list[dict]:
    """One entry per judged row of the new side: ok, or BELOW EXPECTED with the share it reached."""
    from commbench.sweep.bandwidth_bound import bandwidth_bound_from

    frame = run.results
    if common.EXPECTED_BUSBW_GBPS not in frame.columns:
        return []  # a kind without busbw (training) has nothing to hold against a link's rate
    expected = pd.to_numeric(frame[common.EXPECTED_BUSBW_GBPS], errors="coerce")
    if not (expected > 0).any():
        bases = sorted({str(basis).removeprefix("none: ") for basis in frame.get(common.EXPECTED_BASIS, [])
                        if isinstance(basis, str) and basis})
        why = "; ".join(bases) or "none recorded"
        raise CommbenchError(f"--fail-below-expected: the new run's rows carry no expected busbw ({why}); re-run the "
                             "sweep, or import with --machine PRESET or --facts FILE")
    entries = []
    keys = [key for key in CURVE_KEYS if key in frame.columns]
    for _, curve in frame.groupby(keys, sort=False):
        from_bytes, how = bandwidth_bound_from(curve)
        for _, row in curve.iterrows():
            figure, busbw = as_number(row[common.EXPECTED_BUSBW_GBPS]), as_number(row[common.BUSBW_GBPS])
            if float(row[common.SIZE_BYTES]) < from_bytes or math.isnan(figure) or figure <= 0 or math.isnan(busbw):
                continue
            share = 100 * busbw / figure
            entries.append({
                "row": prefix + run.kind.row_label(row), "metric": "busbw of expected", "new": busbw,
                "baseline": figure, "threshold_pct": percent,
                "verdict": BELOW_EXPECTED if share < percent else "ok",
                "why": f"busbw {busbw:.4g} GB/s is {share:.0f} % of the expected {figure:.4g} GB/s "
                       f"({row.get('expected_basis')}); the gate wants {percent:g} % where bandwidth dominates "
                       f"(from {from_bytes / 2**20:.2g} MiB: {how})"})
    return entries


def below(entries: list[dict]) -> list[dict]:
    return [entry for entry in entries if entry["verdict"] == BELOW_EXPECTED]
