"""What the gate says of each compared row (its verdict words) and the one rule that turns a change, its threshold and
its tests into a verdict. compare.py gives each row its entry; gate_verdict.py counts them into the gate's line."""

ALPHA = 0.01
REGRESSION, IMPROVED, NOISE, OK = "REGRESSION", "improved", "~", "ok"
NEW, MISSING, NOT_COMPARABLE, INCOMPLETE = "new", "missing", "not comparable", "incomplete run"
WRONG = "WRONG RESULTS"
"""A new row whose check failed (n_wrong > 0): its figures are not valid, and the gate fails whatever the speed."""
UNCHECKED = "unchecked"
"""A new row that no check verified (n_wrong empty): its correctness is unknown, never 0 wrong. Its speed is still
judged and it fails nothing (the run chose not to check), but it is listed and the gate's line counts it."""
UNCHECKED_WHY = "n_wrong empty: the new run did not check it (--no-check, -c 0, or a source without #wrong)"
NO_FIGURE = "no figure"
"""A row with nothing to gate: a no-op (in place at world size 1), or a time at the timer's resolution on a side."""
WIDE_CI_PCT = 10.0
"""A side whose 95 % CI of the median reaches further than this from the median (either way) is a noisy point."""

Entry = dict[str, object]
"""One line of a comparison: a row (or bench, or run) with its verdict and why, and for a compared metric its
figures and tests; a JSON object as `commbench compare --json` writes it."""


def verdict(worse_pct: float, threshold: float, p_worse: float | None, p_better: float | None,
            within_floor: bool = False, alpha: float = ALPHA) -> str:
    """OK within the threshold; beyond it, a regression (or improvement) only where the test says it is more than
    noise (p < alpha, or no test: a deterministic value) and the change is beyond the launch-noise floor."""
    if abs(worse_pct) <= threshold:
        return OK
    if within_floor:
        return NOISE
    if worse_pct > 0:
        return REGRESSION if p_worse is None or p_worse < alpha else NOISE
    return IMPROVED if p_better is None or p_better < alpha else NOISE


_UNITS = (("_gbps", "GB/s"), ("_us", "us"), ("_ms", "ms"), ("_bytes", "B"))


def metric_unit(column: str) -> str:
    """The unit of a metric's column, from the unit its name ends in (every result column names its unit)."""
    stem = column.removesuffix("_p50")
    return next((unit for suffix, unit in _UNITS if stem.endswith(suffix)), "")


def change_text(worse_pct: float) -> str:
    """The change in words, so that its direction cannot be misread: "12.3 % worse", "5.1 % better", "0.0 %"."""
    shown = f"{abs(worse_pct):.1f}"
    if shown == "0.0":
        return "0.0 %"
    return f"{shown} % {'worse' if worse_pct > 0 else 'better'}"
