"""Pure arithmetic on the figures other tools print: how precise a printed number is, and whether a printed busbw
agrees with the one the time and the collective's formula give, within what the printing rounded away."""

import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from commbench.imports.model import ImportedTest

AGREES = "agrees"
NOT_RECOMPUTED = "not recomputed"


def half_unit(text: str) -> float:
    """Half of the last printed digit's unit: what rounding may have moved the value ("12.34" → 0.005, "1.2e+04" →
    50, "7" → 0.5). A value printed in full precision (JSON's %lf) still has its last digit."""
    try:
        exponent = Decimal(text.strip()).as_tuple().exponent
    except InvalidOperation:
        return math.nan
    return 0.5 * 10.0 ** exponent if isinstance(exponent, int) else math.nan


def number(text: str) -> float:
    """A printed figure as a float; nan for what the tool prints where it has none (N/A, nan, -nan)."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def busbw_check(*, size_bytes: int, time_us: str, busbw_gbps: str, factor: float | None, why_not: str = "") -> str:
    """Does the printed busbw follow from the printed size and time, busbw = S / t × factor (GB/s = 1e9 B/s)?

    Both printed values were rounded: the recomputed figure spans S·f / (t ± half a unit of t), the printed one
    busbw ± half its last unit, and they agree when the two intervals meet. "agrees", "differs: …", or
    "not recomputed: why" (a collective whose algbw is not S / t, or no time to divide by)."""
    if factor is None:
        return f"{NOT_RECOMPUTED}: {why_not}"
    time, printed = number(time_us), number(busbw_gbps)
    if not (time > 0 and math.isfinite(printed)):
        return f"{NOT_RECOMPUTED}: no time above 0 or no busbw printed"
    slack_time, slack_busbw = half_unit(time_us), half_unit(busbw_gbps)
    scale = size_bytes * factor / 1e3  # bytes per microsecond → GB/s
    high = scale / (time - slack_time) if time > slack_time else math.inf
    low = scale / (time + slack_time)
    epsilon = 1e-9 * max(abs(printed), 1.0)
    if low - slack_busbw - epsilon <= printed <= high + slack_busbw + epsilon:
        return AGREES
    return f"differs: {scale / time:.6g} GB/s from the size and time"


def mean_agrees(values: list[str], printed: str) -> tuple[float, bool]:
    """The mean of printed values, and whether it reproduces a printed average within their rounding."""
    numbers = [number(value) for value in values]
    finite = [value for value in numbers if math.isfinite(value)]
    if not finite:
        return math.nan, False
    mean = sum(finite) / len(finite)
    slack = sum(half_unit(value) for value, parsed in zip(values, numbers) if math.isfinite(parsed)) / len(finite)
    slack += half_unit(printed) if math.isfinite(half_unit(printed)) else 0.0
    return mean, abs(mean - number(printed)) <= slack + 1e-9 * max(abs(mean), 1.0)


def check_busbw(test: ImportedTest, factor: Callable[[str], float | None], why_not: Callable[[str], str]) -> None:
    """Fill each row's busbw_check: factor(collective) is the busbw factor at the test's world size, or None where
    the size and time do not give the algbw (why_not(collective) says why)."""
    for row in test.rows:
        row.busbw_check = busbw_check(size_bytes=row.size_bytes, time_us=row.printed["time_us"],
                                      busbw_gbps=row.printed["busbw_gbps"], factor=factor(row.collective),
                                      why_not=why_not(row.collective))
