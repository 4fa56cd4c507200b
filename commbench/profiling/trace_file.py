"""Read a Kineto (torch.profiler) JSON trace, plain or gzipped, into flat numpy columns."""

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

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
    args: list = field(repr=False)  # the args dict of each event (or None)

    def __len__(self) -> int:
        return len(self.ts)


def _open(path: Path):
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gzipped else open(path, encoding="utf-8")


def _int(value, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def load_trace(path: str | Path) -> TraceEvents:
    """Parse one trace. Like HTA, events need a duration and a category, 'Trace' spans are dropped, and when the
    trace has sub-µs (float) timestamps every interval is rounded inward to whole µs (ts up, ts+dur down)."""
    path = Path(path)
    try:
        with _open(path) as file:
            document = json.load(file)
    except FileNotFoundError:
        raise CommbenchError(f"{path} does not exist; pass a Kineto trace (.json or .json.gz)") from None
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, zlib.error) as error:
        raise CommbenchError(f"{path} is not a JSON trace ({type(error).__name__}); pass a torch.profiler "
                             "Chrome/Kineto trace (.json or .json.gz)") from None
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise CommbenchError(f"{path} has no traceEvents: it is not a torch.profiler (Kineto) trace")
    columns: dict[str, list] = {key: [] for key in ("name", "cat", "ts", "dur", "tid", "stream", "correlation",
                                                      "args")}
    float_times = False
    for event in events:  # one pass: traces of real jobs hold hundreds of thousands of events
        if not isinstance(event, dict):
            continue
        cat, duration = event.get("cat"), event.get("dur")
        if duration is None or cat is None or cat == "Trace" or event.get("ts") is None:
            continue
        args = event.get("args")
        columns["name"].append(str(event.get("name", "")))
        columns["cat"].append(cat)
        columns["ts"].append(event["ts"])
        columns["dur"].append(duration)
        columns["tid"].append(event.get("tid"))
        columns["args"].append(args)
        has_args = isinstance(args, dict)
        columns["stream"].append(_int(args.get("stream")) if has_args and "stream" in args else -1)
        columns["correlation"].append(_int(args.get("correlation")) if has_args and "correlation" in args else -1)
        float_times = float_times or isinstance(event["ts"], float)
    if not columns["ts"]:
        raise CommbenchError(f"{path} holds no timed events (ts, dur, cat); record a trace with torch.profiler "
                             "while the job runs")
    ts = np.array(columns["ts"], dtype=np.float64)
    end = ts + np.array(columns["dur"], dtype=np.float64)
    if float_times:
        ts, end = np.ceil(ts), np.floor(end)
    info = document.get("distributedInfo") or {}
    return TraceEvents(
        path=str(path),
        rank=_int(info.get("rank"), None) if info else None,
        world_size=_int(info.get("world_size"), None) if info else None,
        backend=info.get("backend"),
        name=np.array(columns["name"], dtype=object),
        cat=np.array(columns["cat"], dtype=object),
        ts=ts,
        end=end,
        tid=np.array(columns["tid"], dtype=object),
        stream=np.array(columns["stream"], dtype=np.int64),
        correlation=np.array(columns["correlation"], dtype=np.int64),
        args=columns["args"],
    )
