"""One job's torch.profiler traces and every analysis commbench makes of them, behind one value: `trace analyze`,
the training sweeps' exposed communication and replay's plan ask a TraceAnalysis instead of chaining the analysers.
Each view is computed when first asked for, so a reader that needs only the calls does not pay for the skew."""

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from commbench.profiling.call_stats import size_histogram
from commbench.profiling.collective_calls import Call, collective_calls
from commbench.profiling.overlap import analyze as overlap_of
from commbench.profiling.skew import skew_report
from commbench.profiling.stragglers import straggler_view
from commbench.profiling.trace_file import TraceEvents, load_trace, trace_paths


@dataclass(frozen=True, eq=False)
class TraceAnalysis:
    traces: tuple[TraceEvents, ...]
    """One per rank (or per file given), in the order given; folders expanded to the traces in them."""

    @cached_property
    def overlap(self) -> list[dict]:
        """Per trace: communication, computation, overlap %, exposed communication and idle time, per ProfilerStep
        and per collective kind (profiling/overlap.py)."""
        return [overlap_of(trace) for trace in self.traces]

    @cached_property
    def calls(self) -> dict[str, list[Call]]:
        """Each trace's collective calls (its path → the calls in issue order: kind, size, group, sequence)."""
        return {trace.path: collective_calls(trace) for trace in self.traces}

    @property
    def every_call(self) -> list[Call]:
        return [call for found in self.calls.values() for call in found]

    @cached_property
    def size_histogram(self) -> list[dict]:
        """Per collective kind and size: the calls and their busbw percentiles (profiling/call_stats.py)."""
        return size_histogram(self.every_call)

    @cached_property
    def skew(self) -> dict:
        """The same call's start across ranks, per point and overall (profiling/skew.py)."""
        return skew_report(list(self.traces))

    @cached_property
    def stragglers(self) -> dict | None:
        """Which rank arrives last at each matched call; None for a single trace (profiling/stragglers.py)."""
        return straggler_view(self.calls) if len(self.traces) > 1 else None

    @property
    def world_size(self) -> int | None:
        """The world size the traces were recorded at, where their distributedInfo says."""
        worlds = [trace.world_size for trace in self.traces if trace.world_size]
        return max(worlds) if worlds else None


def analyze(paths: Iterable[str | Path]) -> TraceAnalysis:
    """The traces at these paths (files, or folders of them), loaded and checked: a file that is not a
    torch.profiler trace is refused in one line (CommbenchError)."""
    return TraceAnalysis(tuple(load_trace(path) for path in trace_paths(tuple(Path(path) for path in paths))))
