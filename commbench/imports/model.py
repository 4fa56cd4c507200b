"""What an importer reads out of another tool's file, before it becomes a commbench run folder (write.py)."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

SourceName = Literal["nccl-tests", "param", "nccl-inspector"]
NCCL_INSPECTOR: SourceName = "nccl-inspector"
"""The tools `commbench import` reads (imports/__init__.py's SOURCES): each one's command, its files' `tool`, its
rows' source column."""

NCCL_TESTS_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
"""How nccl-tests writes a time (src/util.cu TIME_STRING_FORMAT: -J's start_time and end_time, -S 1's row
timestamps): the local time of the machine that ran it, with no zone."""


def nccl_tests_time(text: object) -> str | None:
    """An nccl-tests time as ISO 8601 without a zone (2026-03-10T09:15:00), or None where it is not one."""
    try:
        return datetime.strptime(str(text).strip(), NCCL_TESTS_TIME_FORMAT).isoformat()
    except ValueError:
        return None


@dataclass
class ImportedRow:
    """One result row as the source printed it: one size of one test, one placement."""

    collective: str
    """commbench's name where commbench runs it (all_to_all for nccl-tests' alltoall), else the source's own."""
    size_bytes: int
    count: int
    dtype: str
    op: str
    inplace: bool
    time_us: float
    """The figure the source's bandwidths were computed from: nccl-tests' time per call, PARAM's p50."""
    algbw_gbps: float
    busbw_gbps: float
    printed: dict
    """The time (in microseconds) and busbw as the source printed them: their precision bounds the busbw check."""
    busbw_check: str = ""
    n_wrong: int | None = None
    """The source's wrong-element count; None where it did not check or printed no count."""
    calls_per_sample: int | None = None
    iters: int | None = None
    """Samples behind the time: 1 for nccl-tests (one batch of calls_per_sample calls), None where unknown."""
    warmup: int | None = None
    more_times_us: dict = field(default_factory=dict)
    """p75, p95, min, max, stdev where the source prints them (keys time_us_p75, ...)."""
    samples_us: list[float] = field(default_factory=list)
    """Per-iteration times where the source recorded them (nccl-tests -J with per-iteration timing)."""
    note: str = ""


@dataclass
class ImportedTest:
    """One table of a file: a run of one program (nccl-tests concatenates several in one log)."""

    program: str
    """all_reduce_perf, COMMS-RES-all_reduce-float32, ..."""
    line: int | None
    """Where it starts in the file (1-based), for messages."""
    header: str | None = None
    world_size: int | None = None
    ranks: list[dict] = field(default_factory=list)
    """Per rank: rank, host, device, gpu (the source's device lines)."""
    closing: dict = field(default_factory=dict)
    """The closing lines as printed, and how they check against the rows; `started` (ISO 8601) and `started_from`
    (what that time is) where the source records when the test ran."""
    rows: list[ImportedRow] = field(default_factory=list)


@dataclass
class ImportedFile:
    name: str
    sha256: str
    tool: SourceName
    version: str | None
    backend: str
    device: str
    timing_method: str
    tests: list[ImportedTest]
    notes: list[str] = field(default_factory=list)
