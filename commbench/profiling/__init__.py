"""Profiling: torch.profiler capture, Kineto trace analysis (overlap, exposed communication, skew), NVML sampling.

`analyze(paths)` is the one entry to trace analysis (profiling/analysis.py); the ranks import only what they sample
and capture with, so this package imports nothing until asked."""

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.profiling.analysis import TraceAnalysis


def analyze(paths: Iterable[str | Path]) -> "TraceAnalysis":
    """Every analysis of one job's traces (files or folders), each computed when first asked for."""
    from commbench.profiling import analysis

    return analysis.analyze(paths)
