"""A side's rows as the gate joins them: one row per configuration (its identity columns), with each metric's value
in every launch of a run set and the CI half-width of each sampled quantity, medians over the launches; and what is
said where rows do not join: two sides that share no configuration are refused, a row the other side lacks says
why (another dtype, world size, backend or device)."""

import math
import statistics
from collections.abc import Sequence

import pandas as pd

from commbench.errors import CommbenchError
from commbench.gate import sides
from commbench.measure.stats import stored_half_width_pct

RowKey = tuple[str, ...]
"""A row's identity values, as text."""
JoinedRow = tuple[pd.Series, dict[str, list[float]]]
"""A configuration's row (each metric the median over launches) and each metric's value per launch, by column."""


def rows_by_key(run: sides.Run, identity: Sequence[str]) -> dict[RowKey, JoinedRow]:
    """One row per configuration, with each metric's value in every launch that has the row (by metric column; the
    median where a launch has several rows of one configuration). In a run set, each metric is the median over the
    launches, and so is the CI half-width of each sampled quantity (stored under ci_key)."""
    groups: dict[RowKey, list[pd.Series]] = {}
    for _, row in run.results.iterrows():
        groups.setdefault(tuple(str(row[column]) for column in identity), []).append(row)
    return {key: _merged(run, rows) for key, rows in groups.items()}


def _merged(run: sides.Run, rows: list[pd.Series]) -> JoinedRow:
    """The rows of one configuration (a launch each, or several) as one."""
    row, values = rows[0].copy(), {}
    for metric in run.kind.metrics:
        if metric.column in row.index:
            values[metric.column] = _per_launch(rows, metric.column)
            row[metric.column] = float(pd.Series([r[metric.column] for r in rows], dtype=float).median())
    for samples in {metric.samples for metric in run.kind.metrics if metric.samples}:
        # an import without samples has no CI: not assessed, rather than infinitely wide
        widths = [_ci_half_width_pct(r, samples) if run.has_samples else None for r in rows]
        row[ci_key(samples)] = None if None in widths else float(pd.Series(widths, dtype=float).median())
    return row, values


def _per_launch(rows: list[pd.Series], column: str) -> list[float]:
    """The column's value in each launch: the median of the launch's rows."""
    by_launch: dict[object, list[float]] = {}
    for row in rows:
        by_launch.setdefault(row[sides.LAUNCH_COLUMN], []).append(float(row[column]))
    return [statistics.median(found) for found in by_launch.values()]


def ci_key(samples: str) -> str:
    return f"_{samples}_ci_half_width_pct"  # a leading _: no results column is named so


def _ci_half_width_pct(row: pd.Series, samples: str) -> float | None:
    """How far the 95 % CI of the median reaches from it, the wider side, in % of the median (stats.Summary's
    ci_half_width_pct, from the stored row); inf when the row has no interval (too few samples); None when the kind
    stores no interval for these samples. The columns follow the samples' name: time_us → time_us_p50,
    time_us_ci_lo, time_us_ci_hi; step_time_ms → step_time_ms_p50, ...)."""
    if not all(f"{samples}{suffix}" in row.index for suffix in ("_p50", "_ci_lo", "_ci_hi")):
        return None
    width = stored_half_width_pct(row, samples)
    return math.inf if math.isnan(width) else width


def note(row: pd.Series) -> str:
    value = row.get("note")
    return value if isinstance(value, str) else ""  # absent, or an empty CSV cell read as NaN


def check_anything_joins(base: sides.Run, new: sides.Run, comparability: Sequence[str]) -> None:
    """Refuse two sides that share no configuration (every row of one at another world size, backend or device
    than every row of the other): a table of `not comparable` rows and a failed gate would say nothing true."""
    conditions = [column for column in comparability if column != "schema_version"]
    if not conditions or base.results.empty or new.results.empty:
        return
    sides_configs = [{tuple(str(value) for value in row) for row in run.results[conditions].itertuples(index=False)}
                     for run in (base, new)]
    if sides_configs[0] & sides_configs[1]:
        return
    differences = [f"{column.replace('_', ' ')} {_values(base.results[column])} vs {_values(new.results[column])}"
                   for column in conditions
                   if set(base.results[column].astype(str)) != set(new.results[column].astype(str))]
    same = ", ".join(column.replace("_", " ") for column in conditions)
    raise CommbenchError(f"nothing to compare: the runs share no configuration ({'; '.join(differences)}); "
                         f"compare runs of the same {same}")


def _values(column: pd.Series) -> str:
    return ",".join(sorted(set(column.astype(str))))


def why_unmatched(row: pd.Series, other: pd.DataFrame, identity: Sequence[str], comparability: Sequence[str],
                   otherwise: str) -> str:
    """Say when the other run has this row in another dtype (not comparable), or ran at no such world size, backend
    or device at all, rather than only that it lacks the row."""
    elsewhere = [f"{column.replace('_', ' ')} {row[column]} vs {_values(other[column])}" for column in comparability
                 if column != "schema_version" and column in other.columns
                 and str(row[column]) not in set(other[column].astype(str))]
    if elsewhere:
        return f"{otherwise}: {'; '.join(elsewhere)}"
    if "dtype" in identity:
        loose = [column for column in identity if column != "dtype"]
        mask = pd.Series(True, index=other.index)
        for column in loose:
            mask &= other[column].astype(str) == str(row[column])
        if mask.any():
            return f"not comparable: dtype {row['dtype']} vs {', '.join(sorted(set(other.loc[mask, 'dtype'])))}"
    return otherwise
