"""The metrics the gate can judge (every bench kind's), their default thresholds, and `--fail METRIC:PERCENT`."""

import math

from commbench.bench_kind import BenchKind, Metric
from commbench.benches import KINDS
from commbench.errors import CommbenchError

METRIC_NAMES = tuple(dict.fromkeys(metric.name for kind in KINDS.values() for metric in kind.metrics))
"""Every metric some bench kind gates on (busbw, time, step_time, peak_mem)."""
DEFAULT_THRESHOLDS = {metric.name: metric.default_threshold_pct for kind in KINDS.values() for metric in kind.metrics
                      if metric.default_threshold_pct is not None}


def metrics_of(kind: BenchKind) -> dict[str, Metric]:
    """A kind's metrics by name."""
    return {metric.name: metric for metric in kind.metrics}


def parse_threshold(text: str) -> tuple[str, float]:
    """busbw:5% → ("busbw", 5.0)."""
    name, _, value = text.partition(":")
    if name not in METRIC_NAMES or not value:
        raise CommbenchError(f"bad --fail {text!r}: write METRIC:PERCENT with METRIC one of {', '.join(METRIC_NAMES)}, "
                             "e.g. busbw:5%")
    try:
        percent = float(value.strip().removesuffix("%"))
    except ValueError:
        raise CommbenchError(f"bad --fail {text!r}: the threshold must be a percentage, e.g. busbw:5%") from None
    if not math.isfinite(percent):  # nan% never trips and inf% never can: the gate would pass every run
        raise CommbenchError(f"bad --fail {text!r}: the threshold must be a finite percentage, e.g. busbw:5%")
    if percent < 0:
        raise CommbenchError(f"bad --fail {text!r}: the threshold cannot be negative")
    return name, percent
