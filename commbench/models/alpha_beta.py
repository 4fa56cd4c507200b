"""α–β (Hockney) fits of measured collective times: t(S) = α + S/bandwidth, per collective, impl, backend, world and
environment combination (the rows' `env`: NCCL_ALGO=tree and NCCL_ALGO=ring are two curves, each fitted on its own).

Least squares weighted by relative error (each point counts by its error in percent, so the microsecond latencies
of small messages weigh as much as the milliseconds of large ones). α is the latency of one collective in µs;
the slope gives the asymptotic algbw, and busbw = algbw × the collective's factor.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from commbench.errors import CommbenchError
from commbench.names import COLLECTIVE_BENCH, PER_ITERATION, busbw_factor
from commbench.schema import common
from commbench.units import readable

GROUP_KEYS = ["collective", "impl", "backend", common.WORLD_SIZE, "dtype", "op", "inplace", "timing", "env"]
"""One fit per key: a fit across timing modes would mix two measurements of each size (per-iteration and batch), one
across environments two algorithms or protocols."""
DEFAULT_ENV = ""
"""The env of rows written before the column, and of rows measured in the environment the run was started in."""
_MIN_SIZES = 2
_MIN_SIZES_PER_SEGMENT = 3
_PIECEWISE_GAIN = 4.0  # two segments fit this many times better: the curve has a knee (protocol switch)
_PIECEWISE_MIN_RMS = 0.05  # … and the single line misses by more than 5 % RMS: below that it is noise


@dataclass
class LineFit:
    alpha_us: float
    us_per_byte: float
    r2: float
    sse: float


@dataclass
class AlphaBetaFit:
    collective: str
    impl: str
    backend: str
    world_size: int
    dtype: str
    op: str
    inplace: bool
    timing: str
    env: str
    """The environment combination's label (commbench/sweep/env_axes.py); "" for the default environment."""
    n_points: int
    alpha_us: float
    algbw_gbps: float
    busbw_gbps: float
    r2: float
    note: str
    residuals: list[dict] = field(default_factory=list)


def fit_line(sizes_bytes: np.ndarray, times_us: np.ndarray) -> LineFit:
    """Weighted least squares of t = α + β·S with weights 1/t² (relative error)."""
    sizes_bytes, times_us = np.asarray(sizes_bytes, float), np.asarray(times_us, float)
    weights = 1.0 / times_us**2
    design = np.column_stack([np.ones_like(sizes_bytes), sizes_bytes])
    root = np.sqrt(weights)
    (alpha, beta), *_ = np.linalg.lstsq(design * root[:, None], times_us * root, rcond=None)
    predicted = alpha + beta * sizes_bytes
    sse = float(np.sum(weights * (times_us - predicted) ** 2))
    mean = np.sum(weights * times_us) / np.sum(weights)
    sst = float(np.sum(weights * (times_us - mean) ** 2))
    return LineFit(float(alpha), float(beta), 1.0 - sse / sst if sst > 0 else 1.0, sse)


def _piecewise_note(sizes: np.ndarray, times: np.ndarray, whole: LineFit) -> str:
    if np.sqrt(whole.sse / len(sizes)) < _PIECEWISE_MIN_RMS:
        return ""
    distinct = np.unique(sizes)
    best = None
    for split in distinct[_MIN_SIZES_PER_SEGMENT:len(distinct) - _MIN_SIZES_PER_SEGMENT + 1]:
        low, high = sizes < split, sizes >= split
        sse = fit_line(sizes[low], times[low]).sse + fit_line(sizes[high], times[high]).sse
        if best is None or sse < best[0]:
            best = (sse, split)
    if best and best[0] * _PIECEWISE_GAIN < whole.sse:
        gain = whole.sse / best[0] if best[0] > 0 else float("inf")
        gain_text = f"{gain:.0f}x" if gain < 1000 else "over 1000x"
        return (f"piecewise: two lines split at {readable(int(best[1]))} fit {gain_text} better (protocol or algorithm "
                "switch); fit the ranges separately")
    return ""


def fit_group(rows: pd.DataFrame) -> AlphaBetaFit:
    first = rows.iloc[0]
    sizes, times = rows[common.SIZE_BYTES].to_numpy(float), rows[common.TIME_US_P50].to_numpy(float)
    if len(sizes) < 2:
        raise ValueError("a fit needs two points")
    line = fit_line(sizes, times)
    algbw_gbps = 1e-3 / line.us_per_byte if line.us_per_byte > 0 else float("nan")
    factor = _busbw_factor(str(first["collective"]), int(first[common.WORLD_SIZE]))
    note = _piecewise_note(sizes, times, line)
    problems = [note]
    if line.alpha_us < 0:
        problems.append("negative α: latency is below what this size range resolves")
    if line.us_per_byte <= 0:
        problems.append("time does not grow with size here: bandwidth unresolved (noise, or sizes too small)")
    if len(np.unique(sizes)) == 2:
        problems.append("two sizes only: the line passes through both, R² = 1 says nothing")
    note = "; ".join(filter(None, problems))
    predicted = line.alpha_us + line.us_per_byte * sizes
    residuals = [{common.SIZE_BYTES: int(size), "time_us_measured": float(time), "time_us_fit": float(fit),
                  "residual_pct": float((fit - time) / time * 100)} for size, time, fit in zip(sizes, times, predicted)]
    return AlphaBetaFit(collective=first["collective"], impl=first["impl"], backend=first["backend"],
                        world_size=int(first[common.WORLD_SIZE]), dtype=str(first["dtype"]), op=str(first["op"]),
                        inplace=bool(first["inplace"]), timing=str(first["timing"]), env=str(first["env"]),
                        n_points=len(rows), alpha_us=line.alpha_us, algbw_gbps=algbw_gbps,
                        busbw_gbps=algbw_gbps * factor, r2=line.r2, note=note, residuals=residuals)


def _busbw_factor(name: str, world: int) -> float:
    """The collective's busbw factor (names.py: commbench's and nccl-tests' collectives); NaN where none is known."""
    found = busbw_factor(name, world)
    return found if found is not None else float("nan")


def fit_results(results: pd.DataFrame) -> list[AlphaBetaFit]:
    """One fit per GROUP_KEYS (collective, impl, backend, world size, dtype, op, placement, timing mode, env) that has
    at least two message sizes. Files written before the timing column read as per-iteration, all they could be;
    before the env column as the default environment ("")."""
    fits = []
    results = _filled(_filled(results, "timing", PER_ITERATION), "env", DEFAULT_ENV)
    usable = results[(results["bench"] == COLLECTIVE_BENCH) & np.isfinite(results[common.TIME_US_P50].astype(float))
                     & (results[common.TIME_US_P50].astype(float) > 0)]
    for _, rows in usable.groupby(GROUP_KEYS, sort=False):
        if rows[common.SIZE_BYTES].nunique() >= _MIN_SIZES:
            fits.append(fit_group(rows))
    if not fits:
        raise CommbenchError("no collective was measured at two or more sizes; an α–β fit needs a size sweep "
                             "(e.g. --sizes 1K:64M:x4)")
    return fits


def _filled(results: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
    """results with column's missing cells (or the whole column, in files written before it) set to value; an empty
    CSV cell reads as NaN."""
    if column in results.columns and not results[column].isna().any():
        return results
    present = results[column] if column in results.columns else pd.Series(None, index=results.index, dtype=object)
    return results.assign(**{column: present.astype(object).where(present.notna(), value)})


def hockney_from_all_reduce(fit: AlphaBetaFit) -> tuple[float, float]:
    """(α per ring step in µs, link bandwidth in GB/s) from an all_reduce fit at n ranks:
    t = 2(n−1)α + 2(n−1)/n·S/B, so α = intercept / 2(n−1) and B = busbw."""
    steps = 2 * (fit.world_size - 1)
    return fit.alpha_us / steps, fit.busbw_gbps
