"""NVIDIA NCCL Inspector's JSON output (NVIDIA/nccl plugins/profiler/inspector: README.md, inspector_json.cc,
inspector_json_reader.py) → its collective records, each with the communicator, rank and host it was logged on.

The plugin writes one compact JSON object per line, one per completed operation per communicator, into a file per
process (NCCL_INSPECTOR_DUMP_DIR); its README shows the same objects pretty-printed. Both are read: the objects are
taken one after another, whatever whitespace lies between them. The versions of `inspector_output_format_version`:

- v4.0: `{"header": {id, [comm_name], rank, n_ranks, nnodes}, "metadata": {inspector_output_format_version, git_rev,
  rec_mechanism, dump_timestamp_us, hostname, pid}, "coll_perf": {coll, coll_sn, coll_msg_size_bytes,
  coll_exec_time_us, [coll_timing_source], coll_algobw_gbs, coll_busbw_gbs, [event_trace_sn, event_trace_ts]}}`;
  `p2p_perf` records (Send, Recv) have the same context. The event traces are the verbose form
  (NCCL_INSPECTOR_DUMP_VERBOSE=1): the collective's and each kernel channel's event sequence numbers and timestamps.
- v4.1: adds a `dump_stats` record per communicator and dump, with the records the ring buffer dropped.
- v4.2: adds `coll_algo` and `coll_proto` (ncclAlgoToString / ncclProtoToString: RING, LL, ...) to `coll_perf`.
- v4.3: the `dump_stats` record carries the header and metadata once, and the `coll_records + p2p_records +
  proxy_records` objects after it are bare (`{"coll_perf": ...}`), taking their context from it.

Anything else (another version, JSON that is not the Inspector's, its Prometheus text, a cut record) is a
CommbenchError naming the file and line."""

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from commbench.errors import CommbenchError

FORMAT_VERSIONS = ("v4.0", "v4.1", "v4.2", "v4.3")
MARKER_VERSIONS = ("v4.3",)
"""The versions whose dump_stats record is the context of the bare records that follow it."""
COLLECTIVE, P2P, PROXY, DUMP_STATS = "coll_perf", "p2p_perf", "proxy_trace", "dump_stats"
_COUNTED = {COLLECTIVE: "coll_records", P2P: "p2p_records", PROXY: "proxy_records"}
"""A v4.3 marker's count of each kind of bare record that follows it."""
T = TypeVar("T")

_WANTED = "pass the JSON files NCCL Inspector wrote (NCCL_INSPECTOR_DUMP_DIR, with NCCL_INSPECTOR_PROM_DUMP=0)"


@dataclass(frozen=True)
class Context:
    """Where a record was logged: its communicator, the rank in it, and the process."""

    communicator: str
    """The communicator's id (its hash, "0x7f8c496ae9f661")."""
    name: str
    """Its comm_name ("DP Group 0"); "" where the header has none (v4.0 files before comm_name)."""
    rank: int
    n_ranks: int
    nnodes: int
    host: str
    pid: int | None
    version: str
    git_rev: str
    dumped_us: int | None = None
    """dump_timestamp_us: when the plugin wrote the record (microseconds since the epoch), not when the call ran."""


@dataclass(frozen=True)
class CollectiveRecord:
    """One completed collective call, with its figures as the file wrote them."""

    line: int
    context: Context
    collective: str
    """The Inspector's name (AllReduce, ReduceScatter, ...: inspector.cc ncclFuncToString)."""
    sequence: int | None
    message_bytes: int
    """coll_msg_size_bytes: NCCL's count × the dtype's size (for AllGather and ReduceScatter, one rank's part)."""
    time_us: str
    """coll_exec_time_us as written (whole microseconds)."""
    timing_source: str
    """coll_timing_source (kernel_gpu, kernel_cpu, collective_cpu); "not recorded" in files without it."""
    algbw_gbps: str
    busbw_gbps: str
    algorithm: str | None
    protocol: str | None
    channels: int | None
    """Kernel channels in its event trace (the verbose form); None without one."""


@dataclass
class InspectorLog:
    records: list[CollectiveRecord] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    """Records that are not collectives commbench reads, by kind (p2p_perf, proxy_trace)."""
    dropped: dict[tuple[str, int, str, int | None], int] = field(default_factory=dict)
    """(communicator, rank, host, pid) → collective records its ring buffer dropped (dump_stats, cumulative)."""
    versions: set[str] = field(default_factory=set)


def read(text: str, file_name: str) -> InspectorLog:
    log, marker = InspectorLog(), _Marker()
    for line, value in _objects(text, file_name):
        where = f"{file_name} line {line}"
        if not isinstance(value, dict):
            raise CommbenchError(f"{where}: a JSON {type(value).__name__}, not an Inspector record (an object per "
                                 f"operation); {_WANTED}")
        if DUMP_STATS in value:
            marker.close(where)
            context = _context(value, where)
            log.versions.add(context.version)
            stats = _object(value[DUMP_STATS], DUMP_STATS, where)
            key = (context.communicator, context.rank, context.host, context.pid)
            log.dropped[key] = max(log.dropped.get(key, 0), _count(stats, "coll_dropped_total", where))
            if context.version in MARKER_VERSIONS:
                marker.open(context, {kind: _count(stats, name, where) for kind, name in _COUNTED.items()}, line)
            continue
        kind = next((kind for kind in _COUNTED if kind in value), None)
        if kind is None:
            raise CommbenchError(f"{where}: a record without coll_perf, p2p_perf or proxy_trace (keys: "
                                 f"{', '.join(list(value)[:5]) or 'none'}); not NCCL Inspector output: {_WANTED}")
        if "header" in value or "metadata" in value:
            marker.close(where)
            context = _context(value, where)
            log.versions.add(context.version)
        else:
            context = marker.take(value, where)
        if kind == COLLECTIVE:
            log.records.append(_collective(_object(value[kind], kind, where), context, line, where))
        else:
            log.skipped[kind] = log.skipped.get(kind, 0) + 1
    marker.close(f"{file_name} (its end)")
    return log


class _Marker:
    """A v4.3 dump_stats marker: the context of the bare records after it, and how many of each kind are still due."""

    def __init__(self) -> None:
        self.context: Context | None = None
        self.due: dict[str, int] = {}
        self.line = 0

    def open(self, context: Context, due: dict[str, int], line: int) -> None:
        self.context, self.due, self.line = context, due, line

    def take(self, value: dict, where: str) -> Context:
        kind = next((kind for kind in _COUNTED if kind in value), None)
        if self.context is None or kind is None or len(value) != 1 or self.due.get(kind, 0) <= 0:
            raise CommbenchError(f"{where}: a record without header and metadata that no v4.3 dump_stats record "
                                 "before it announces; the file was split, filtered or edited: pass the file NCCL "
                                 "Inspector wrote, whole")
        self.due[kind] -= 1
        return self.context

    def close(self, where: str) -> None:
        if any(self.due.values()):
            missing = ", ".join(f"{count} {kind}" for kind, count in self.due.items() if count)
            raise CommbenchError(f"{where}: the dump_stats record of line {self.line} announces {missing} record(s) "
                                 "more than follow it; the file was cut or edited: pass the file NCCL Inspector "
                                 "wrote, whole")
        self.context, self.due = None, {}


def _objects(text: str, file_name: str) -> Iterator[tuple[int, object]]:
    """Each JSON value of the text, with the line it starts on: JSON Lines as the plugin writes them, or the
    README's pretty-printed objects one after another."""
    if not text.strip():
        raise CommbenchError(f"{file_name} is empty: the Inspector writes its records at each dump interval and when "
                             f"a communicator is destroyed; {_WANTED}")
    decoder, position, line, counted = json.JSONDecoder(), 0, 1, 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return
        line += text.count("\n", counted, position)
        counted = position
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise CommbenchError(_not_json(text, file_name, line, error)) from None
        yield line, value


def _not_json(text: str, file_name: str, line: int, error: json.JSONDecodeError) -> str:
    if "nccl_bus_bandwidth_gbs" in text or "nccl_collective_exec_time_microseconds" in text:
        return (f"{file_name} is the Inspector's Prometheus text (NCCL_INSPECTOR_PROM_DUMP=1), which keeps no call; "
                f"{_WANTED}")
    if line == 1 and error.pos == 0:
        return f"{file_name} is not JSON (it starts {text.lstrip()[:20]!r}); {_WANTED}"
    return (f"{file_name} line {error.lineno}: not valid JSON ({error.msg}); the file was cut (copied while the job "
            f"wrote it?) or edited: {_WANTED}")


def _object(value: object, name: str, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise CommbenchError(f"{where}: {name} is not an object; the record was edited: {_WANTED}")
    return value


def _field(record: Mapping[str, object], name: str, kinds: type[T] | tuple[type[T], ...], where: str,
           part: str) -> T:
    value = record.get(name)
    if not isinstance(value, kinds) or isinstance(value, bool):
        wrote = "lacks" if name not in record else f"has {value!r} for"
        raise CommbenchError(f"{where}: its {part} {wrote} {name}; the record was cut or edited: {_WANTED}")
    return value


def _count(stats: dict, name: str, where: str) -> int:
    value = stats.get(name, 0)  # proxy_records is absent without proxy tracking: zero
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CommbenchError(f"{where}: dump_stats has {value!r} for {name}, not a count; the record was edited: "
                             f"{_WANTED}")
    return value


def _context(record: dict, where: str) -> Context:
    header = _object(record.get("header"), "header", where)
    metadata = _object(record.get("metadata"), "metadata", where)
    version = metadata.get("inspector_output_format_version")
    if version is None:
        raise CommbenchError(f"{where}: a record without metadata.inspector_output_format_version; not NCCL "
                             f"Inspector output: {_WANTED}")
    if version not in FORMAT_VERSIONS:
        raise CommbenchError(f"{where}: Inspector output format {version!r}; commbench reads "
                             f"{', '.join(FORMAT_VERSIONS)}: pass output of an Inspector that writes one of them")
    n_ranks = _field(header, "n_ranks", int, where, "header")
    rank = _field(header, "rank", int, where, "header")
    if not 0 <= rank < n_ranks:
        raise CommbenchError(f"{where}: header rank {rank} of n_ranks {n_ranks}; the record was edited: {_WANTED}")
    pid, dumped = metadata.get("pid"), metadata.get("dump_timestamp_us")
    return Context(communicator=_field(header, "id", str, where, "header"), name=str(header.get("comm_name") or ""),
                   rank=rank, n_ranks=n_ranks, nnodes=_field(header, "nnodes", int, where, "header"),
                   host=_field(metadata, "hostname", str, where, "metadata"),
                   pid=pid if isinstance(pid, int) else None, version=version,
                   git_rev=str(metadata.get("git_rev") or ""), dumped_us=dumped if isinstance(dumped, int) else None)


def _collective(perf: dict, context: Context, line: int, where: str) -> CollectiveRecord:
    size = _field(perf, "coll_msg_size_bytes", int, where, "coll_perf")
    if size < 0:
        raise CommbenchError(f"{where}: coll_msg_size_bytes {size} is negative; the record was edited: {_WANTED}")
    figures = {name: _figure(perf, name, where) for name in ("coll_exec_time_us", "coll_algobw_gbs",
                                                              "coll_busbw_gbs")}
    sequence = perf.get("coll_sn")
    return CollectiveRecord(
        line=line, context=context, collective=_field(perf, "coll", str, where, "coll_perf"),
        sequence=sequence if isinstance(sequence, int) else None, message_bytes=size,
        time_us=figures["coll_exec_time_us"], timing_source=str(perf.get("coll_timing_source") or "not recorded"),
        algbw_gbps=figures["coll_algobw_gbs"], busbw_gbps=figures["coll_busbw_gbs"],
        algorithm=_name(perf.get("coll_algo")), protocol=_name(perf.get("coll_proto")),
        channels=_channels(perf, where))


def _figure(perf: dict, name: str, where: str) -> str:
    """A figure as text, for the busbw check to know its printed precision: %lf's digits (repr of the float gives
    them back), the integer microseconds, or "nan" (what the plugin writes for a NaN bandwidth; a time is an
    integer)."""
    value = perf.get(name)
    if value == "nan" and name != "coll_exec_time_us":
        return "nan"
    value = _field(perf, name, (int, float), where, "coll_perf")
    if value < 0:
        raise CommbenchError(f"{where}: {name} {value} is negative; the record was edited: {_WANTED}")
    return str(value) if isinstance(value, int) else repr(value)


def _name(value: object) -> str | None:
    """coll_algo / coll_proto; None where absent or "unknown" (the core passed no string)."""
    return value if isinstance(value, str) and value and value != "unknown" else None


def _channels(perf: dict, where: str) -> int | None:
    """The kernel channels of the verbose form's event traces; their sequence-number and timestamp lists must name
    the same channels (inspector_json.cc writes both from one loop)."""
    traces = [perf[name] for name in ("event_trace_sn", "event_trace_ts") if name in perf]
    if not traces:
        return None
    channel_lists = []
    for trace in traces:
        events = _object(trace, "event_trace", where).get("kernel_events")
        if not isinstance(events, list) or not all(isinstance(event, dict) for event in events):
            raise CommbenchError(f"{where}: an event trace without its kernel_events list; the record was cut or "
                                 f"edited: {_WANTED}")
        channel_lists.append([event.get("channel_id") for event in events])
    if any(channels != channel_lists[0] for channels in channel_lists):
        raise CommbenchError(f"{where}: event_trace_sn and event_trace_ts name different kernel channels; the record "
                             f"was edited: {_WANTED}")
    return len(channel_lists[0])
