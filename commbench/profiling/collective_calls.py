"""Every collective call of a trace, one row each: kind, message, process group, duration, bandwidth, step.

A call is one communication event as profiling/overlap.py classifies them (an NCCL kernel, old names and new alike,
or a gloo:* span), with its message from the event's own arguments (torch copies record_param_comms' onto NCCL
kernels), else from the communication call that launched it (record_param_comms' "In/Out msg nelems" and "dtype", or
in older traces its "Input Dims" and "Input type"). Its process group comes from the same arguments ("Process Group
Name", "Process Group Ranks", "Group size"). On CPU, gloo's spans name what gloo ran, not what was asked (a
reduce-scatter runs as an all-reduce) and record the input only (an all-gather's output goes unseen): a span takes
its kind and message from the c10d operator that enqueued it (the k-th operator for the k-th span: gloo works its
queue in order), where the two lists have the same length. algbw = bytes / duration and busbw = algbw × nccl-tests'
factor for the collective at its group size (commbench/nccl_tests.py), bytes being nccl-tests' size:
the larger of the input and output. A call of unknown size or kind has no bandwidth.
"""

import math
import re
from dataclasses import dataclass

import numpy as np

from commbench.nccl_tests import factor as nccl_tests_factor
from commbench.profiling.overlap import classify, enclosing_calls, event_kinds
from commbench.profiling.skew import DTYPE_NAMES
from commbench.profiling.trace_file import TraceEvents

_KINDS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
          "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "alltoall": "all_to_all",
          "alltoallv": "all_to_all", "alltoallbase": "all_to_all", "gather": "gather", "scatter": "scatter",
          "send": "send", "recv": "recv", "barrier": "barrier", "allgatherbase": "all_gather",
          "reducescatterbase": "reduce_scatter", "allgatherintotensor": "all_gather",
          "reducescattertensor": "reduce_scatter"}
"""NCCL kernel kinds (AllReduce), gloo span names (all_reduce) and torch collective names (_allgather_base), reduced
to letters → the collective's name in commbench rows (nccl-tests' where commbench runs none)."""
_TYPE_BYTES = {"float": 4, "c10::half": 2, "c10::bfloat16": 2, "double": 8, "long": 8, "long int": 8, "int": 4,
               "unsigned char": 1, "signed char": 1, "char": 1, "bool": 1, "short": 2, "c10::float8_e4m3fn": 1,
               "c10::float8_e5m2": 1}
"""Older traces' "Input type" (a C++ type name) → bytes per element."""
_TYPE_NAMES = {"float": "float32", "c10::half": "float16", "c10::bfloat16": "bfloat16", "double": "float64",
               "long": "int64", "long int": "int64", "int": "int32", "unsigned char": "uint8", "signed char": "int8",
               "bool": "bool", "short": "int16"}
_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "int16": 2,
                "uint8": 1, "int8": 1, "bool": 1}


@dataclass(frozen=True)
class Message:
    bytes: int
    elements: int
    dtype: str
    """commbench's dtype name (float32, bfloat16, uint8, ...)."""


@dataclass
class Call:
    rank: int | None
    index: int
    """Its place among this trace's calls, in start order."""
    kind: str
    raw_kind: str
    """The name the trace gives (AllReduce, SendRecv, all_reduce, Generic attributed, ...)."""
    message: Message | None
    group: str | None
    group_ranks: tuple[int, ...] | None
    group_size: int | None
    start_us: float
    duration_us: float
    step: int | None
    sequence: int = 0
    """The k-th call of its group, kind and size in its step on this rank: with the step, what matches it with the
    other ranks' calls (ProfilerStep numbers agree across ranks; a size seen in two steps is two calls)."""

    @property
    def algbw_gbps(self) -> float:
        if self.message is None or not self.duration_us > 0:
            return math.nan
        return self.message.bytes / self.duration_us / 1e3

    @property
    def busbw_gbps(self) -> float:
        world = self.group_size
        factor = nccl_tests_factor(self.kind, world) if world else None
        return self.algbw_gbps * factor if factor is not None else math.nan

    def key(self) -> tuple:
        return (self.step, self.group, self.kind, self.message.bytes if self.message else None, self.sequence)


def kind_name(raw: str) -> str:
    letters = re.sub(r"[^a-z]", "", raw.lower())
    return _KINDS.get(letters, raw)


def message_of(args) -> Message | None:
    """The message an event's arguments record: "In/Out msg nelems" with "dtype", or an older record_param_comms'
    "Input Dims" with "Input type" (its first tensor argument)."""
    if not isinstance(args, dict):
        return None
    if "In msg nelems" in args:
        dtype = DTYPE_NAMES.get(str(args.get("dtype")), str(args.get("dtype")).lower())
        elements = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
        size = _DTYPE_BYTES.get(dtype)
        return Message(elements * size, elements, dtype) if size else None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and isinstance(types, list) \
            and types and str(types[0]).lower() in _TYPE_BYTES and all(isinstance(value, int) for value in dims[0]):
        elements = math.prod(dims[0])
        type_name = str(types[0]).lower()
        return Message(elements * _TYPE_BYTES[type_name], elements, _TYPE_NAMES.get(type_name, type_name))
    return None


def _group_of(args) -> tuple[str | None, tuple[int, ...] | None, int | None]:
    if not isinstance(args, dict):
        return None, None, None
    ranks = args.get("Process Group Ranks")
    parsed = None
    if isinstance(ranks, str):
        numbers = re.findall(r"-?\d+", ranks)
        parsed = tuple(int(number) for number in numbers) if numbers else None
    size = args.get("Group size")
    name = args.get("Process Group Name")
    return (str(name) if name is not None else None), parsed, (int(size) if isinstance(size, int) else None)


def collective_calls(trace: TraceEvents) -> list[Call]:
    """The trace's calls in start order, each with its sequence number among calls of its group, kind and size."""
    classified = classify(trace)
    kinds = event_kinds(trace, classified)
    comm = np.flatnonzero(classified.comm)
    comm = comm[np.argsort(trace.ts[comm], kind="stable")]
    gpu = classified.device == "gpu"
    launchers = enclosing_calls(trace, [int(i) for i in comm]) if gpu else {}
    records = _launching_records(trace, comm) if gpu else {}
    enqueued = {} if gpu else _enqueuing_operators(trace, comm)
    steps = classified.steps
    found: list[Call] = []
    counts: dict[tuple, int] = {}
    for i in map(int, comm):
        args = trace.args[i]
        record = records.get(i)
        operator = enqueued.get(i)
        message = (operator_message(trace.args[operator]) if operator is not None else None) or message_of(args) \
            or (message_of(trace.args[record]) if record is not None else None)
        if message is None and launchers.get(i):
            message = _span_message(launchers[i])
        group = _group_of(args)
        if group[0] is None and record is not None:  # the kernel has no copy: its launching call's
            group = _group_of(trace.args[record])
        raw = trace.name[operator].removeprefix("c10d::") if operator is not None else kinds.kind[i]
        name, ranks, size = group
        size = size or (len(ranks) if ranks else None) or trace.world_size
        call = Call(trace.rank, len(found), kind_name(raw), raw, message, name, ranks, size, float(trace.ts[i]),
                    max(0.0, float(trace.end[i] - trace.ts[i])), _step(classified.owner_ts[i], steps))
        key = (call.step, call.group, call.kind, message.bytes if message else None)
        call.sequence = counts.get(key, 0)
        counts[key] = call.sequence + 1
        found.append(call)
    return found


def _enqueuing_operators(trace: TraceEvents, spans) -> dict[int, int]:
    """gloo span → the c10d operator that enqueued it: the k-th (barriers excluded) for the k-th, when they pair."""
    operators = [int(i) for i in np.flatnonzero(trace.cat == "cpu_op")
                 if trace.name[i].startswith("c10d::") and kind_name(trace.name[i].removeprefix("c10d::")) in
                 _KINDS.values() and "barrier" not in trace.name[i]]
    operators.sort(key=lambda i: trace.ts[i])
    spans = [int(i) for i in spans]
    return dict(zip(spans, operators)) if len(operators) == len(spans) else {}


def operator_message(args) -> Message | None:
    """A c10d operator's message: its largest tensor argument (an all-gather's output, a reduce-scatter's input) in
    its first known element type ("Input Dims" / "Input type" with record_shapes)."""
    if not isinstance(args, dict):
        return None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and isinstance(types, list)):
        return None
    element_type = next((str(kind).lower() for kind in types if str(kind).lower() in _TYPE_BYTES), None)
    if element_type is None:
        return None
    elements = max((_elements(arg) for arg in dims), default=0)
    return Message(elements * _TYPE_BYTES[element_type], elements, _TYPE_NAMES.get(element_type, element_type))


def _elements(dims) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    if isinstance(dims[0], list):
        return sum(_elements(inner) for inner in dims)
    return math.prod(value for value in dims if isinstance(value, int))


def _span_message(spans) -> Message | None:
    for span in reversed(spans):
        if span.message is not None:
            size, dtype = span.message
            name = DTYPE_NAMES.get(dtype, dtype.lower())
            element = _DTYPE_BYTES.get(name)
            return Message(size, size // element if element else 0, name)
    return None


def _launching_records(trace: TraceEvents, kernels) -> dict[int, int]:
    """Each kernel's launching record_param_comms event (the innermost one open on its thread at the launch)."""
    cpu_side = trace.stream < 0
    launch: dict[int, int] = {}
    for i in np.flatnonzero(cpu_side & (trace.correlation >= 0)):
        launch.setdefault(int(trace.correlation[i]), int(i))
    records = [int(i) for i in np.flatnonzero(cpu_side & (trace.name == "record_param_comms"))]
    by_thread: dict = {}
    for i in records:
        by_thread.setdefault(trace.tid[i], []).append(i)
    found = {}
    for kernel in map(int, kernels):
        launcher = launch.get(int(trace.correlation[kernel]))
        if launcher is None:
            continue
        time = trace.ts[launcher]
        open_ = [i for i in by_thread.get(trace.tid[launcher], []) if trace.ts[i] <= time <= trace.end[i]]
        if open_:
            found[kernel] = max(open_, key=lambda i: trace.ts[i])
    return found


def _step(owner_ts: float, steps) -> int | None:
    if math.isnan(owner_ts):
        return None
    return next((number for number, start, end in steps if start <= owner_ts <= end), None)
