"""Read a Kineto (torch.profiler) JSON trace, plain or gzipped, into flat numpy columns."""

import gzip
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TypeGuard

import numpy as np

from commbench.errors import CommbenchError


@dataclass
class TraceEvents:
    """The complete ('X') events of one rank's trace; times in µs."""

    path: str
    rank: int | None
    world_size: int | None
    backend: str | None
    name: np.ndarray  # object (str)
    cat: np.ndarray  # object (str)
    ts: np.ndarray  # float64
    end: np.ndarray  # float64
    tid: np.ndarray  # object: Kineto writes ints or strings
    stream: np.ndarray  # int64, -1 for CPU-side events
    correlation: np.ndarray  # int64, -1 when absent
    args: list[object] = field(repr=False)
    """The args of each event as its JSON holds them: a dict (checked where it is read), or None."""

    def __len__(self) -> int:
        return len(self.ts)


Event = Mapping[str, object]
"""One of a trace's traceEvents, as JSON gave it: its fields are checked where they are read (_checked_event)."""


def _open(path: Path) -> IO[str]:
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gzipped else open(path, encoding="utf-8")


_WHOLE_NUMBER_ARGS = ("stream", "correlation", "In msg nelems", "Out msg nelems")
"""Event arguments the analysis computes with: the GPU stream and launch correlation that place a kernel, and a
collective's message size."""


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _foreign(path: Path, index: int, event: Event, problem: str) -> CommbenchError:
    name = str(event.get("name", ""))[:60]
    return CommbenchError(f"{path}: traceEvents[{index}] ({name!r}) {problem}; this is not a torch.profiler trace "
                          "or it was edited: record the trace again")


def _checked_event(path: Path, index: int, event: Event) -> tuple[float, float]:
    """Times are finite numbers and a duration is not negative (Kineto writes them so): NaN or a string would
    otherwise turn every overlap figure into NaN or fail inside numpy. The thread and the ids that classify an
    event have Kineto's types too. Returns (ts, dur)."""
    ts, duration = event["ts"], event["dur"]
    if not _is_number(ts):
        raise _foreign(path, index, event, f"has ts {ts!r}, not a finite number of µs")
    if not _is_number(duration):
        raise _foreign(path, index, event, f"has dur {duration!r}, not a finite number of µs")
    if duration < 0:
        raise _foreign(path, index, event, f"has a negative duration ({duration!r} µs)")
    tid = event.get("tid")
    if tid is not None and not isinstance(tid, (int, str)):
        raise _foreign(path, index, event, f"has tid {tid!r}, not a thread id (a number or a name)")
    args = event.get("args")
    if isinstance(args, dict):
        for key in _WHOLE_NUMBER_ARGS:
            if key in args and not (isinstance(args[key], int) and not isinstance(args[key], bool)):
                raise _foreign(path, index, event, f"has args.{key} {args[key]!r}, not a whole number")
    return ts, duration


@dataclass(frozen=True)
class DistributedInfo:
    """torch.profiler's distributedInfo, the fields commbench reads; None where the trace has none."""

    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None


def _whole_number(path: Path, info: Mapping[str, object], key: str) -> int | None:
    value = info.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise CommbenchError(f"{path}: distributedInfo.{key} is {value!r}, not a whole number of 0 or more; "
                         "record the trace again")


def _distributed_info(path: Path, document: Mapping[str, object]) -> DistributedInfo:
    """torch.profiler's distributedInfo (rank, world size, backend), checked: it labels every figure printed."""
    info = document.get("distributedInfo")
    if info is None:
        return DistributedInfo()
    if not isinstance(info, dict):
        raise CommbenchError(f"{path}: distributedInfo is a JSON {type(info).__name__}, not an object; this is not "
                             "a torch.profiler trace or it was edited: record the trace again")
    rank, world_size = _whole_number(path, info, "rank"), _whole_number(path, info, "world_size")
    backend = info.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise CommbenchError(f"{path}: distributedInfo.backend is {backend!r}, not a name; record the trace "
                             "again")
    return DistributedInfo(rank, world_size, backend)


def load_trace(path: str | Path) -> TraceEvents:
    """Parse one trace. Like HTA, events need a duration and a category, 'Trace' spans are dropped, and when the
    trace has sub-µs (float) timestamps every interval is rounded inward to whole µs (ts up, ts+dur down)."""
    path = Path(path)
    try:
        with _open(path) as file:
            document: object = json.load(file)
    except FileNotFoundError:
        raise CommbenchError(f"{path} does not exist; pass a Kineto trace (.json or .json.gz)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, zlib.error) as error:
        raise CommbenchError(f"{path} is not a JSON trace ({type(error).__name__}); pass a torch.profiler "
                             "Chrome/Kineto trace (.json or .json.gz)") from None
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(events, list):
        raise CommbenchError(f"{path} has no traceEvents: it is not a torch.profiler (Kineto) trace")
    columns: dict[str, list[object]] = {key: [] for key in ("name", "cat", "ts", "dur", "tid", "stream", "correlation",
                                                      "args")}
    info = _distributed_info(path, document)
    float_times = False
    for index, item in enumerate(events):  # one pass: traces of real jobs hold hundreds of thousands of events
        if not isinstance(item, dict):
            continue
        event: Event = item
        cat, duration = event.get("cat"), event.get("dur")
        if duration is None or cat is None or cat == "Trace" or event.get("ts") is None:
            continue
        start, duration = _checked_event(path, index, event)
        args = event.get("args")
        columns["name"].append(str(event.get("name", "")))
        columns["cat"].append(cat)
        columns["ts"].append(start)
        columns["dur"].append(duration)
        columns["tid"].append(event.get("tid"))
        columns["args"].append(args)
        columns["stream"].append(args["stream"] if isinstance(args, dict) and "stream" in args else -1)
        columns["correlation"].append(args["correlation"] if isinstance(args, dict) and "correlation" in args else -1)
        float_times = float_times or isinstance(start, float)
    if not columns["ts"]:
        raise CommbenchError(f"{path} holds no timed events (ts, dur, cat); record a trace with torch.profiler "
                             "while the job runs")
    ts = np.array(columns["ts"], dtype=np.float64)
    end = ts + np.array(columns["dur"], dtype=np.float64)
    if float_times:
        ts, end = np.ceil(ts), np.floor(end)
    return TraceEvents(
        path=str(path),
        rank=info.rank,
        world_size=info.world_size,
        backend=info.backend,
        name=np.array(columns["name"], dtype=object),
        cat=np.array(columns["cat"], dtype=object),
        ts=ts,
        end=end,
        tid=np.array(columns["tid"], dtype=object),
        stream=np.array(columns["stream"], dtype=np.int64),
        correlation=np.array(columns["correlation"], dtype=np.int64),
        args=columns["args"],
    )


# in folders: gzipped JSON and torch's *.pt.trace.json; plain *.json there are often not traces (meta.json)
_FOLDER_SUFFIXES = (".json.gz", ".pt.trace.json")


def trace_paths(paths: tuple[Path, ...]) -> list[Path]:
    """Files as given; folders (e.g. results/<run>/traces) expand to the traces inside them."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(_FOLDER_SUFFIXES)))
        else:
            found.append(path)
    if not found:
        raise CommbenchError(f"no trace files in {', '.join(map(str, paths))}; pass .json or .json.gz traces")
    return found
