"""Where bandwidth, not latency, dominates a collective's time: the size from which a table gives % of expected and
the gate judges a row against its expected busbw (gate/expected.py)."""

import pandas as pd

from commbench.schema import common

AVERAGE_FROM_BYTES = 1024**2  # small sizes measure latency, not bandwidth: the "mean busbw ≥ 1 MiB" leaves them out

BANDWIDTH_SHARE = 0.9
"""Bandwidth dominates a size where the α–β fit's transfer time S·β is at least this share of the fitted time:
S ≥ 9·α/β. At S = α/β a time is half latency, and real curves (protocol switches) reach far less of their ceiling
there than the line says (a two-node H100 log: 16 % at 32 MiB, 90 % at 8 GiB)."""


def bandwidth_bound_from(group: pd.DataFrame) -> tuple[float, str]:
    """The size from which bandwidth dominates a row's time, and how it was found: where the α–β fit's transfer time
    is BANDWIDTH_SHARE of the time, given two sizes or more and a fit with both terms positive; else 1 MiB."""
    from commbench.models.alpha_beta import fit_line

    usable = group[pd.to_numeric(group[common.TIME_US_P50], errors="coerce") > 0]
    if usable[common.SIZE_BYTES].nunique() >= 2:
        line = fit_line(usable[common.SIZE_BYTES].astype(float).to_numpy(),
                        usable[common.TIME_US_P50].astype(float).to_numpy())
        if line.alpha_us > 0 and line.us_per_byte > 0:
            share = BANDWIDTH_SHARE / (1 - BANDWIDTH_SHARE)
            return share * line.alpha_us / line.us_per_byte, f"{share:.0f}·α/β of the α–β fit"
    return float(AVERAGE_FROM_BYTES), "1 MiB (no α–β fit)"
