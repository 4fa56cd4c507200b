"""Which traces were recorded together: one point's traces, one per rank, told apart by commbench's file names.

A profiled sweep writes `rank<R>-<collective>-<impl>-<dtype>-<op>-<placement>-<size>B.json.gz` per rank and point
(profiling/capture.py's trace_file_name), a training sweep `rank<R>-<bench>-config<NNN>.json.gz` per rank and
configuration (training/measure.py). Traces in one folder whose names differ only in the rank prefix are one point.
Any other name cannot be placed: those traces stay one set, the files as given.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from commbench.profiling.trace_file import TraceEvents
from commbench.units import format_bytes

_RANK_PREFIX = re.compile(r"^rank(?P<rank>\d+)-(?P<point>.+?)(?:\.json\.gz|\.pt\.trace\.json|\.json)$")
_SWEEP_POINT = re.compile(r"^(?P<collective>[a-z_]+)-(?P<impl>[a-z]+)-(?P<dtype>[a-z0-9]+)-(?P<op>[a-z]+)"
                          r"-(?P<placement>inplace|outofplace)-(?P<size_bytes>\d+)B$")
_TRAINING_POINT = re.compile(r"^(?P<bench>.+)-config(?P<config>\d+)$")


class PointKeys(TypedDict, total=False):
    """What a trace's name says of its point: a sweep point's (collective … size_bytes), or a training
    configuration's (bench, config); empty for other names."""

    collective: str
    impl: str
    dtype: str
    op: str
    inplace: bool
    size_bytes: int
    bench: str
    config: int


@dataclass
class TraceGroup:
    """Traces to match against each other: one point's (name set), or the given files that no name places."""

    name: str | None  # the file name without its rank prefix; None for the unplaced files
    folder: str | None
    keys: PointKeys  # what the name says: collective, impl, dtype, op, inplace, size_bytes; or bench, config
    traces: list[TraceEvents] = field(default_factory=list)
    index: int = -1  # position in the listing, set once every group is known

    @property
    def is_point(self) -> bool:
        return self.name is not None

    def label(self) -> str:
        """The point as a person reads it: 'all_reduce builtin float32 sum in-place 1 MiB', 'ddp config 3'."""
        keys = self.keys
        if "size_bytes" in keys:
            placement = "in-place" if keys["inplace"] else "out-of-place"
            return (f"{keys['collective']} {keys['impl']} {keys['dtype']} {keys['op']} {placement} "
                    f"{format_bytes(keys['size_bytes'])}")
        if "config" in keys:
            return f"{keys['bench']} config {keys['config']}"
        return self.name or "the given traces"


def point_keys(name: str) -> PointKeys:
    """The point a sweep's or a training run's trace name (without the rank prefix) stands for; {} for others."""
    if match := _SWEEP_POINT.match(name):
        keys = match.groupdict()
        return {"collective": keys["collective"], "impl": keys["impl"], "dtype": keys["dtype"], "op": keys["op"],
                "inplace": keys["placement"] == "inplace", "size_bytes": int(keys["size_bytes"])}
    if match := _TRAINING_POINT.match(name):
        return {"bench": match["bench"], "config": int(match["config"])}
    return {}


def file_rank(path: str) -> int | None:
    """The rank a commbench trace's name gives (rank<R>-...), None for other names."""
    match = _RANK_PREFIX.match(Path(path).name)
    return int(match["rank"]) if match else None


def trace_rank(trace: TraceEvents) -> int | None:
    """The rank torch.profiler recorded (distributedInfo), else the one in the file name."""
    return trace.rank if trace.rank is not None else file_rank(trace.path)


def group_by_point(traces: list[TraceEvents]) -> list[TraceGroup]:
    """Points in sweep order where the names say it (collective, impl, dtype, op, size, placement) or by config,
    each with its traces by rank; the unplaced files last, as one set."""
    groups: dict[tuple[str, str], TraceGroup] = {}
    unplaced = TraceGroup(None, None, {})
    for trace in traces:
        path = Path(trace.path)
        match = _RANK_PREFIX.match(path.name)
        if match is None:
            unplaced.traces.append(trace)
            continue
        key = (str(path.parent), match["point"])
        if key not in groups:
            groups[key] = TraceGroup(match["point"], str(path.parent), point_keys(match["point"]))
        groups[key].traces.append(trace)
    ordered = sorted(groups.values(), key=_listing_order)
    if unplaced.traces:
        ordered.append(unplaced)
    for index, group in enumerate(ordered):
        group.index = index
        group.traces.sort(key=lambda trace: (trace_rank(trace) is None, trace_rank(trace) or 0, trace.path))
    return ordered


def _listing_order(group: TraceGroup) -> tuple[str | None, tuple[object, ...]]:
    keys = group.keys
    within: tuple[object, ...]
    if "size_bytes" in keys:
        within = (0, keys["collective"], keys["impl"], keys["dtype"], keys["op"], keys["size_bytes"],
                  keys["inplace"])  # out-of-place first, as the sweep runs them
    elif "config" in keys:
        within = (1, keys["bench"], keys["config"])
    else:
        within = (2, group.name)
    return (group.folder, within)
