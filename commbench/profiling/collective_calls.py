"""Every collective call of a trace, one row each: kind, message, process group, duration, bandwidth, step.

A call is one communication event as profiling/overlap.py classifies them (an NCCL kernel, old names and new alike,
or a gloo:* span), with its message from the event's own arguments (torch copies record_param_comms' onto NCCL
kernels), else from the communication call that launched it (record_param_comms' "In/Out msg nelems" and "dtype", or
in older traces its "Input Dims" and "Input type"). An NCCL kernel's kind is the collective that was asked for (the
"Collective name" of its own arguments or of its launching record_param_comms) where the trace records one: NCCL runs
an all-to-all, gather or scatter as SendRecv kernels. Its process group comes from the same arguments ("Process Group
Name", "Process Group Ranks", "Group size"); Kineto cuts "Process Group Ranks" to its first 30 ranks
("[0, 1, ..., 29, ...]"), so the group's size is "Group size", never the length of that list. gloo's spans (on CPU
tensors, or on CUDA tensors copied to the host) name what gloo ran, not what was asked (a reduce-scatter runs as an
all-reduce) and record the input only (an all-gather's output goes unseen): a span takes its kind and message from the
c10d operator that enqueued it (the k-th operator for the k-th span: gloo works its queue in order), where the two
lists have the same length. algbw = bytes / duration and busbw = algbw × nccl-tests' factor for the collective at its
group size (commbench/names.py), bytes being nccl-tests' size: the larger of the input and output. A call of
unknown size or kind has no bandwidth. Element sizes and dtype spellings are names.py's."""

import math
import re
from dataclasses import dataclass

import numpy as np

from commbench.names import TRACE_COLLECTIVES, TRACE_CPP_TYPES, busbw_factor, element_bytes, trace_dtype
from commbench.profiling.comm_calls import dims_elements
from commbench.profiling.overlap import CommCallSpan, classify, enclosing_calls, event_kinds, is_gloo_span
from commbench.profiling.trace_file import TraceEvents

CUT_RANKS = "..."
"""How Kineto marks a "Process Group Ranks" list it cut (kTruncatLength = 30: "[0, 1, ..., 29, ...]")."""


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
    """None where the trace records none, or cut the list (group_ranks_cut)."""
    group_size: int | None
    start_us: float
    duration_us: float
    step: int | None
    group_ranks_cut: bool = False
    """Kineto cut the group's rank list (a group over 30 ranks): only group_size tells its size."""
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
        factor = busbw_factor(self.kind, world) if world else None
        return self.algbw_gbps * factor if factor is not None else math.nan

    def key(self) -> tuple:
        return (self.step, self.group, self.kind, self.message.bytes if self.message else None, self.sequence)


def kind_name(raw: str) -> str:
    letters = re.sub(r"[^a-z]", "", raw.lower())
    return TRACE_COLLECTIVES.get(letters, raw)


def message_of(args: object) -> Message | None:
    """The message an event's arguments record: "In/Out msg nelems" with "dtype", or an older record_param_comms'
    "Input Dims" with "Input type" (its first tensor argument)."""
    if not isinstance(args, dict):
        return None
    if "In msg nelems" in args:
        dtype = trace_dtype(args.get("dtype"))
        elements = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
        size = element_bytes(dtype)
        return Message(elements * size, elements, dtype) if size else None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and isinstance(types, list) \
            and types and (size := _type_bytes(types[0])) and all(isinstance(value, int) for value in dims[0]):
        elements = math.prod(dims[0])
        dtype = TRACE_CPP_TYPES[str(types[0]).lower()]
        return Message(elements * size, elements, dtype)  # size: _type_bytes(types[0]), i.e. element_bytes(dtype)
    return None


def _type_bytes(type_name: object) -> int | None:
    """Bytes per element of an "Input type" entry (a C++ type name); None for what is no known element type."""
    dtype = TRACE_CPP_TYPES.get(str(type_name).lower())
    return element_bytes(dtype) if dtype else None


@dataclass(frozen=True)
class Group:
    """The process group an event's arguments name."""

    name: str | None = None
    ranks: tuple[int, ...] | None = None
    size: int | None = None
    """"Group size": the only count of a group's ranks that Kineto never cuts."""
    cut: bool = False
    """"Process Group Ranks" was cut to its first ranks: ranks is then None."""


def group_of(args: object) -> Group:
    """The group of a communication event ("Process Group Name", "Process Group Ranks", "Group size"). Kineto writes
    at most 30 ranks ("[0, 1, ..., 29, ...]"): a cut list names no ranks, and its length is no size."""
    if not isinstance(args, dict):
        return Group()
    text = args.get("Process Group Ranks")
    ranks, cut = None, False
    if isinstance(text, str):
        cut = CUT_RANKS in text
        numbers = re.findall(r"-?\d+", text)
        ranks = tuple(int(number) for number in numbers) if numbers and not cut else None
    size = args.get("Group size")
    name = args.get("Process Group Name")
    return Group(str(name) if name is not None else None, ranks,
                 int(size) if isinstance(size, int) and not isinstance(size, bool) else None, cut)


def _asked_kind(ran: str, *argument_sets: object) -> str:
    """The kind of an NCCL kernel's call: what was asked for (its "Collective name") where NCCL ran it as SendRecv
    kernels (an all-to-all, gather or scatter), else what ran. Sends and receives stay "sendrecv", so the two ends of
    one transfer pair up across ranks."""
    if kind_name(ran) != "sendrecv":
        return ran
    for args in argument_sets:
        asked = args.get("Collective name") if isinstance(args, dict) else None
        kind = kind_name(str(asked)) if asked else None
        if kind is not None and kind in TRACE_COLLECTIVES.values() and kind not in ("send", "recv", "sendrecv"):
            return kind
    return ran


def collective_calls(trace: TraceEvents) -> list[Call]:
    """The trace's calls in the order they were issued (a kernel's or gloo span's start; a gloo span paired with its
    c10d operator at the operator's), each with its sequence number among calls of its group, kind and size."""
    classified = classify(trace)
    kinds = event_kinds(trace, classified)
    comm = np.flatnonzero(classified.comm)
    comm = comm[np.argsort(trace.ts[comm], kind="stable")]
    # gloo's spans (on CPU tensors, or gloo on CUDA tensors in a GPU trace) pair with the c10d operators that
    # enqueued them; kernels with the CPU calls that launched them
    spans = [int(i) for i in comm if is_gloo_span(trace, int(i))]
    kernels = [int(i) for i in comm if not is_gloo_span(trace, int(i))]
    launchers = enclosing_calls(trace, kernels) if kernels else {}
    records = _launching_records(trace, kernels) if kernels else {}
    enqueued = _enqueuing_operators(trace, spans)
    # in the order the calls were issued, which every rank shares: a gloo span where its operator enqueued it
    issued = sorted(map(int, comm), key=lambda i: (trace.ts[enqueued.get(i, i)], trace.ts[i]))
    steps = classified.steps
    found: list[Call] = []
    counts: dict[tuple, int] = {}
    for i in map(int, issued):
        args = trace.args[i]
        record = records.get(i)
        operator = enqueued.get(i)
        message = (operator_message(trace.args[operator]) if operator is not None else None) or message_of(args) \
            or (message_of(trace.args[record]) if record is not None else None)
        if message is None and launchers.get(i):
            message = _span_message(launchers[i])
        group = group_of(args)
        if group.name is None and record is not None:  # the kernel has no copy: its launching call's
            group = group_of(trace.args[record])
        raw = trace.name[operator].removeprefix("c10d::") if operator is not None else kinds.kind[i]
        kind = kind_name(_asked_kind(raw, args, trace.args[record] if record is not None else None))
        # a cut rank list without "Group size" leaves the size unknown: the trace's world size could be wrong
        size = group.size or (len(group.ranks) if group.ranks else None) or (None if group.cut else trace.world_size)
        call = Call(trace.rank, len(found), kind, raw, message, group.name, group.ranks, size, float(trace.ts[i]),
                    max(0.0, float(trace.end[i] - trace.ts[i])), _step(classified.owner_ts[i], steps),
                    group_ranks_cut=group.cut)
        key = (call.step, call.group, call.kind, message.bytes if message else None)
        call.sequence = counts.get(key, 0)
        counts[key] = call.sequence + 1
        found.append(call)
    return found


_OVERTAKING_SPANS = 8
"""How many of the earliest unpaired gloo spans an operator's own span is looked for among: gloo's threads (2 by
default) each start the next queued call, so a span starts at most a few places out of queue order."""


def _enqueuing_operators(trace: TraceEvents, spans: list[int]) -> dict[int, int]:
    """gloo span → the c10d operator that enqueued it (barriers excluded), where operators and spans are as many.
    gloo works its queue in order, on several threads: two calls queued back to back can start in either order, and
    not in the same order on every rank. So each operator, in the order they were enqueued, takes among the earliest
    spans not yet taken (that start after it) the first that holds one of its tensors (the shape gloo records), else
    the first of them."""
    operators = [int(i) for i in np.flatnonzero(trace.cat == "cpu_op")
                 if trace.name[i].startswith("c10d::") and kind_name(trace.name[i].removeprefix("c10d::")) in
                 TRACE_COLLECTIVES.values() and "barrier" not in trace.name[i]]
    if len(operators) != len(spans):
        return {}
    operators.sort(key=lambda i: trace.ts[i])
    free = sorted((int(i) for i in spans), key=lambda i: trace.ts[i])
    found: dict[int, int] = {}
    for operator in operators:
        shapes = set(_tensor_shapes(trace.args[operator]))
        candidates = []
        for span in free:
            if trace.ts[span] >= trace.ts[operator]:
                candidates.append(span)
                if len(candidates) == _OVERTAKING_SPANS:
                    break
        candidates = candidates or free[:1]
        chosen = next((span for span in candidates if _first_shape(trace.args[span]) in shapes), candidates[0])
        free.remove(chosen)
        found[chosen] = operator
    return found


def _tensor_shapes(args: object) -> list[tuple[int, ...]]:
    """The shape of every tensor an operator's "Input Dims" records (a tensor list's too)."""
    dims = args.get("Input Dims") if isinstance(args, dict) else None
    shapes: list[tuple[int, ...]] = []
    for arg in dims if isinstance(dims, list) else []:
        if isinstance(arg, list) and arg and all(isinstance(inner, list) for inner in arg):
            shapes += [tuple(inner) for inner in arg]
        elif isinstance(arg, list) and arg:
            shapes.append(tuple(arg))
    return shapes


def _first_shape(args: object) -> tuple[int, ...] | None:
    dims = args.get("Input Dims") if isinstance(args, dict) else None
    return tuple(dims[0]) if isinstance(dims, list) and dims and isinstance(dims[0], list) else None


def operator_message(args: object) -> Message | None:
    """A c10d operator's message: its largest tensor argument (an all-gather's output, a reduce-scatter's input) in
    its first known element type ("Input Dims" / "Input type" with record_shapes)."""
    if not isinstance(args, dict):
        return None
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and isinstance(types, list)):
        return None
    element_type = next((kind for kind in types if _type_bytes(kind)), None)
    if element_type is None:
        return None
    elements = max((dims_elements(arg) for arg in dims), default=0)
    dtype = TRACE_CPP_TYPES[str(element_type).lower()]
    size = element_bytes(dtype)
    assert size is not None  # element_type was chosen for its known size (_type_bytes)
    return Message(elements * size, elements, dtype)


def _span_message(spans: list[CommCallSpan]) -> Message | None:
    for span in reversed(spans):
        if span.message is not None:
            size, dtype = span.message
            name = trace_dtype(dtype)
            element = element_bytes(name)
            return Message(size, size // element if element else 0, name)
    return None


def _launching_records(trace: TraceEvents, kernels: list[int]) -> dict[int, int]:
    """Each kernel's launching record_param_comms event (the innermost one open on its thread at the launch)."""
    cpu_side = trace.stream < 0
    launch: dict[int, int] = {}
    for i in np.flatnonzero(cpu_side & (trace.correlation >= 0)):
        launch.setdefault(int(trace.correlation[i]), int(i))
    records = [int(i) for i in np.flatnonzero(cpu_side & (trace.name == "record_param_comms"))]
    by_thread: dict[object, list[int]] = {}  # Kineto's thread ids: ints or names
    for record in records:
        by_thread.setdefault(trace.tid[record], []).append(record)
    found: dict[int, int] = {}
    for kernel in map(int, kernels):
        launcher = launch.get(int(trace.correlation[kernel]))
        if launcher is None:
            continue
        time = trace.ts[launcher]
        open_ = [i for i in by_thread.get(trace.tid[launcher], []) if trace.ts[i] <= time <= trace.end[i]]
        if open_:
            found[kernel] = max(open_, key=lambda i: trace.ts[i])
    return found


def _step(owner_ts: float, steps: list[tuple[int, float, float]]) -> int | None:
    if math.isnan(owner_ts):
        return None
    return next((number for number, start, end in steps if start <= owner_ts <= end), None)
