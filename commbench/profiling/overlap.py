"""Communication vs computation in a trace: overlap %, exposed communication, idle time, per step and per kind.

GPU traces follow Holistic Trace Analysis: kernels named like NCCL are communication, memcpy/memset are neither,
every other kernel is computation, and a kernel belongs to the time (step) of the CPU call that launched it. gloo's
gloo:* spans are communication in every trace: CPU (gloo) traces have no kernels, and their computation is the main
thread's aten:: ops; gloo on CUDA tensors launches no communication kernel either (it copies the tensors to the host,
runs on its own threads and copies back), so in a GPU trace its gloo:* spans are the communication and the kernels
the computation. FSDP's copies around its collectives (packing shards into the all-gather input, unpacking the
gathered parameters, packing gradients for the reduce-scatter) launch ordinary copy kernels that HTA would count as
computation; they are the communication's own work, so in a GPU trace they count as communication (known by the FSDP
call that launched them; `comm_copy_us` says how much), never as the computation that hides it. Overlap % =
|comm ∩ comp| / |comm|; exposed communication = |comm| − |comm ∩ comp|. Per-kind
totals name NCCL kernels by their collective (AllReduce, SendRecv, ...); a Generic kernel by the call that launched
it; gloo spans by what gloo ran (all_reduce, broadcast, ...).
"""

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from commbench.names import NCCL_KERNEL_KINDS, element_bytes, trace_dtype
from commbench.profiling import intervals
from commbench.profiling.trace_file import TraceEvents

# HTA's patterns (hta/common/types.py), so that both tools classify a kernel the same way
COMM_KERNEL = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
MEMORY_KERNEL = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
NOT_COMPUTE_KERNEL = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|(^runFunction)"
    r"|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)")
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)")
_GPU_SYNC_EVENTS = {"Event Sync", "Context Sync"}
_NCCL_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
GLOO_SPAN = "gloo:"
"""gloo names the span of each collective it runs gloo:<collective> (cat user_annotation), on CPU and CUDA tensors."""
GENERIC = "Generic"
"""NCCL ≥ 2.19 runs a collective without a kernel of its own in ncclDevKernel_Generic*: the kernel name does not
say which collective it is, so it is attributed to the collective of the CPU call that launched it."""
_COLLECTIVE_PREFIXES = tuple(sorted(((collective.replace("_", ""), kind)
                                     for collective, kind in NCCL_KERNEL_KINDS.items()),
                                    key=lambda prefix: -len(prefix[0])))
"""The start of a torch collective's name (letters only, lower case) → the NCCL kernel kind that runs it
(names.NCCL_KERNEL_KINDS), so an attributed Generic kernel counts with the kernels named after its collective. The
longest first: reduce_scatter_tensor is a reducescatter, not a reduce."""
EventIndex = int | np.integer
"""An event's index in TraceEvents: an int, or numpy's (np.flatnonzero's)."""
FSDP_COPY_OPS = frozenset({"fsdp::all_gather_copy_in", "fsdp::split_with_sizes_copy", "fsdp::chunk_cat"})
"""FSDP2's copy operators (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the all-gather's copy-in and
copy-out and the reduce-scatter's copy-in. Their kernels are generic copy/cat kernels, named for nothing FSDP, so a
device event is one of them when its launch lies inside such an operator on the launching thread."""
FSDP_COPY_SPAN = re.compile(r"^FSDP::all_gather(_copy_out)?( \(|$)")
"""FSDP2's record_function spans around an all-gather's copy-in (with the cast of the shards to the parameter dtype,
outside all_gather_copy_in) and around its copy-out: "FSDP::all_gather (blocks.0)"."""


@dataclass
class Classified:
    """Which events are communication or computation, and the time that places each event in a step."""

    device: str  # "gpu" or "cpu"
    comm: np.ndarray  # bool per event
    comp: np.ndarray  # bool per event
    owner_ts: np.ndarray  # GPU: the launching CPU call's start; CPU: the event's own start; NaN = unplaced
    steps: list[tuple[int, float, float]]  # (step number, start, end) of each ProfilerStep window
    comm_copy: np.ndarray | None = None  # bool per event: FSDP's copy work around a collective (GPU), timed as comm

    def __post_init__(self) -> None:
        if self.comm_copy is None:
            self.comm_copy = np.zeros(len(self.comm), dtype=bool)


def classify(trace: TraceEvents) -> Classified:
    gpu_side = ((trace.stream >= 0) & (trace.correlation >= 0)) | np.isin(trace.name, list(_GPU_SYNC_EVENTS))
    cpu_side = ~gpu_side
    steps = sorted((int(match.group(1)), trace.ts[i], trace.end[i])
                   for i in np.flatnonzero(cpu_side) if (match := PROFILER_STEP.match(trace.name[i])))
    if gpu_side.any():
        return _classify_gpu(trace, gpu_side, cpu_side, steps)
    return _classify_cpu(trace, steps)


def _classify_gpu(trace: TraceEvents, gpu_side: np.ndarray, cpu_side: np.ndarray,
                  steps: list[tuple[int, float, float]]) -> Classified:
    launch_ts: dict[int, float] = {}
    for i in np.flatnonzero(cpu_side & (trace.correlation >= 0)):
        launch_ts.setdefault(int(trace.correlation[i]), trace.ts[i])
    owner_ts = trace.ts.copy()
    for i in np.flatnonzero(gpu_side):
        owner_ts[i] = launch_ts.get(int(trace.correlation[i]), math.nan)  # no launching CPU call: HTA drops it
    # gloo on CUDA tensors: its spans on the host are the communication (HTA, NCCL-only, would find none); their
    # host<->device copies stay memory, as every memcpy
    comm = gloo_spans(trace) & cpu_side
    comp = np.zeros(len(trace), dtype=bool)
    copies = fsdp_copies(trace, gpu_side, cpu_side)
    for i in np.flatnonzero(trace.stream != -1):  # only device events: names are matched once each
        name = trace.name[i]
        if COMM_KERNEL.match(name):
            comm[i] = True
        elif not copies[i] and not MEMORY_KERNEL.match(name) and not NOT_COMPUTE_KERNEL.match(name):
            comp[i] = True
    return Classified("gpu", comm, comp, owner_ts, steps, copies & ~comm)


def fsdp_copies(trace: TraceEvents, gpu_side: np.ndarray, cpu_side: np.ndarray) -> np.ndarray:
    """Which device events FSDP's copy operators or copy spans launched (FSDP_COPY_OPS, FSDP_COPY_SPAN): bool per
    event, found by the launching CPU call (same correlation id) lying inside one on its thread."""
    found = np.zeros(len(trace), dtype=bool)
    spans: dict = defaultdict(list)  # thread → (start, end) of its FSDP copy calls
    for i in np.flatnonzero(cpu_side):
        name = trace.name[i]
        if name in FSDP_COPY_OPS or (name.startswith("FSDP::") and FSDP_COPY_SPAN.match(name)):
            spans[trace.tid[i]].append((float(trace.ts[i]), float(trace.end[i])))
    if not spans:
        return found
    merged = {tid: intervals.merge(np.array([s for s, _ in found_spans]), np.array([e for _, e in found_spans]))
              for tid, found_spans in spans.items()}
    launcher: dict[int, np.intp] = {}
    for i in np.flatnonzero(cpu_side & (trace.correlation >= 0)):
        launcher.setdefault(int(trace.correlation[i]), i)
    for i in np.flatnonzero(gpu_side & (trace.correlation >= 0)):
        call = launcher.get(int(trace.correlation[i]))
        if call is None or trace.tid[call] not in merged:
            continue
        starts, ends = merged[trace.tid[call]]
        at = float(trace.ts[call])
        index = int(np.searchsorted(starts, at, side="right")) - 1
        found[i] = index >= 0 and at <= ends[index]
    return found


def gloo_spans(trace: TraceEvents) -> np.ndarray:
    """Which events are gloo's record of a collective it ran (gloo:all_reduce, gloo:broadcast, ...): bool per event."""
    return (trace.cat == "user_annotation") & np.array([name.startswith(GLOO_SPAN) for name in trace.name], dtype=bool)


def is_gloo_span(trace: TraceEvents, i: int) -> bool:
    return trace.cat[i] == "user_annotation" and trace.name[i].startswith(GLOO_SPAN)


def _classify_cpu(trace: TraceEvents, steps: list[tuple[int, float, float]]) -> Classified:
    comm = gloo_spans(trace)
    aten = (trace.cat == "cpu_op") & np.array([name.startswith("aten::") for name in trace.name], dtype=bool)
    step_threads = [trace.tid[i] for i in range(len(trace)) if PROFILER_STEP.match(trace.name[i])]
    threads = Counter(step_threads) or Counter(trace.tid[aten])
    main_thread = threads.most_common(1)[0][0] if threads else None
    comp = aten & np.array([tid == main_thread for tid in trace.tid], dtype=bool)
    return Classified("cpu", comm, comp, trace.ts.copy(), steps)


def window_metrics(trace: TraceEvents, classified: Classified, selected: np.ndarray) -> dict:
    """Times (µs) of the selected events: unions, their overlap, exposed communication and idle time."""
    comm_mask, comp_mask = (classified.comm | classified.comm_copy) & selected, classified.comp & selected
    copy_mask = classified.comm_copy & selected
    comm = intervals.merge(trace.ts[comm_mask], trace.end[comm_mask])
    comp = intervals.merge(trace.ts[comp_mask], trace.end[comp_mask])
    comm_us, compute_us = intervals.total(*comm), intervals.total(*comp)
    overlap_us = intervals.intersection_length(comm, comp)
    either = comm_mask | comp_mask
    busy_us = intervals.total(*intervals.merge(trace.ts[either], trace.end[either]))
    span_us = float(trace.end[either].max() - trace.ts[either].min()) if either.any() else 0.0
    return {
        "comm_us": comm_us,
        "comm_copy_us": intervals.total(*intervals.merge(trace.ts[copy_mask], trace.end[copy_mask])),
        "compute_us": compute_us,
        "overlap_us": overlap_us,
        "overlap_pct": round(100 * overlap_us / comm_us, 2) if comm_us > 0 else None,
        "exposed_comm_us": comm_us - overlap_us,
        "idle_us": max(0.0, span_us - busy_us),
    }


def analyze(trace: TraceEvents) -> dict:
    """Whole trace (events placed up to the end of the last ProfilerStep, HTA's include_last_profiler_step=True),
    complete steps (placed before the last step starts, HTA's default), and each step."""
    classified = classify(trace)
    owner = classified.owner_ts
    placed = ~np.isnan(owner)
    steps = classified.steps
    result: dict[str, object] = {"path": trace.path, "rank": trace.rank, "world_size": trace.world_size,
                                 "backend": trace.backend, "device": classified.device}
    if steps:
        last_start, last_end = max(start for _, start, _ in steps), max(end for _, _, end in steps)
        whole = placed & (owner <= last_end)
        result.update(window_metrics(trace, classified, whole))
        result["complete_steps"] = window_metrics(trace, classified, placed & (owner < last_start))
        result["steps"] = [{"step": number, **window_metrics(trace, classified,
                                                              placed & (owner >= start) & (owner <= end))}
                           for number, start, end in steps]
    else:
        whole = placed
        result.update(window_metrics(trace, classified, whole))
        result["complete_steps"] = None
        result["steps"] = []
    result["collectives"] = collective_kinds(trace, classified, whole, event_kinds(trace, classified))
    return result


def _kind(name: str, device: str) -> str:
    if device == "cpu" or name.startswith(GLOO_SPAN):
        return name.removeprefix(GLOO_SPAN)
    match = _NCCL_KIND.search(name)
    return match.group(1) if match else name.split("(")[0]


def _collective_kind(name: object) -> str | None:
    """The NCCL kind of a torch collective's name ("allreduce", "_allgather_base", "reduce_scatter_tensor_coalesced",
    "all_to_all", ...); None for what is no collective (e.g. record_param_comms' "wait")."""
    if not name:
        return None
    letters = re.sub(r"[^a-z]", "", str(name).lower())
    return next((kind for prefix, kind in _COLLECTIVE_PREFIXES if letters.startswith(prefix)), None)


def _launcher_kind(name: str, args: object) -> str | None:
    """The collective a CPU-side communication call stands for: record_param_comms (its "Collective name"),
    the backend's nccl:<collective> span or a c10d::<collective> operator; None for any other event."""
    if name == "record_param_comms":
        return _collective_kind(args.get("Collective name")) if isinstance(args, dict) else None
    if name.startswith(("nccl:", "c10d::")):
        return _collective_kind(name.split(":")[-1])
    return None


@dataclass
class Kinds:
    """The kind of each communication event (None elsewhere), and which of them are NCCL Generic kernels."""

    kind: list  # str or None per event
    generic: np.ndarray  # bool per event: an ncclDevKernel_Generic* kernel (its kind attributed, or GENERIC)
    launcher_bytes: dict  # event index → message bytes read from the launching record_param_comms


def event_kinds(trace: TraceEvents, classified: Classified) -> Kinds:
    """Each communication event's kind: gloo's span name, or the NCCL kernel's (AllReduce, SendRecv, ...). A Generic
    kernel takes its collective from its own "Collective name" (torch copies record_param_comms' arguments onto NCCL
    kernels), else from the innermost communication call on the CPU thread whose span holds the kernel's launch (the
    cudaLaunchKernel of the same correlation id); with neither it stays GENERIC (unattributed)."""
    kind: list = [None] * len(trace)
    generic = np.zeros(len(trace), dtype=bool)
    for i in np.flatnonzero(classified.comm):
        kind[i] = _kind(trace.name[i], classified.device)
        generic[i] = classified.device == "gpu" and kind[i] == GENERIC
    launcher_bytes: dict = {}
    pending: list[np.intp] = []
    for i in np.flatnonzero(generic):
        args = trace.args[i]
        own = _collective_kind(args.get("Collective name")) if isinstance(args, dict) else None
        if own:
            kind[i] = own
        else:
            pending.append(i)
    if pending:
        _attribute_by_launch(trace, pending, kind, launcher_bytes)
    return Kinds(kind, generic, launcher_bytes)


def _attribute_by_launch(trace: TraceEvents, kernels: list[np.intp], kind: list[str | None],
                         launcher_bytes: dict[int, int]) -> None:
    for kernel, enclosing in enclosing_calls(trace, kernels).items():
        kind[kernel] = enclosing[-1].kind
        message = _innermost_message(enclosing)
        if message is not None:
            launcher_bytes[kernel] = message[0]


@dataclass(frozen=True)
class CommCallSpan:
    """A CPU-side communication call (record_param_comms, nccl:*, c10d::*) and the message it records."""

    start: float
    end: float
    kind: str
    message: tuple[int, str] | None  # (bytes, torch dtype name as the trace writes it, e.g. "Float")


def enclosing_calls(trace: TraceEvents, kernels: Iterable[EventIndex]) -> dict[int, list[CommCallSpan]]:
    """For each kernel, the communication calls open on its launching thread when it was launched (the
    cudaLaunchKernel of the same correlation id), outermost first; kernels with none are left out."""
    launches = _launches_by_thread(trace, kernels)
    if not launches:
        return {}
    calls = _comm_calls_by_thread(trace, set(launches))
    found: dict[int, list[CommCallSpan]] = {}
    for tid, thread_launches in launches.items():
        found.update(_calls_open_at(calls[tid], thread_launches))
    return found


def _launches_by_thread(trace: TraceEvents, kernels: Iterable[EventIndex]) -> dict[object, list[tuple[float, int]]]:
    """Thread → (launch time, kernel index) of each kernel whose launching CPU-side (runtime) call the trace holds
    (the one with the kernel's correlation id)."""
    launch: dict[int, int] = {}  # correlation id → the CPU-side event that launched the kernel
    for i in np.flatnonzero((trace.stream < 0) & (trace.correlation >= 0)):
        launch.setdefault(int(trace.correlation[i]), int(i))
    launches: dict[object, list[tuple[float, int]]] = defaultdict(list)
    for kernel in kernels:
        launcher = launch.get(int(trace.correlation[kernel]))
        if launcher is not None:
            launches[trace.tid[launcher]].append((float(trace.ts[launcher]), int(kernel)))
    return launches


def _comm_calls_by_thread(trace: TraceEvents, threads: set[object]) -> dict[object, list[CommCallSpan]]:
    """Thread → its CPU-side communication calls (record_param_comms, nccl:*, c10d::*), for the given threads."""
    calls: dict[object, list[CommCallSpan]] = defaultdict(list)
    for i in np.flatnonzero(trace.stream < 0):
        tid = trace.tid[i]
        if tid not in threads:
            continue
        call_kind = _launcher_kind(trace.name[i], trace.args[i])
        if call_kind:
            calls[tid].append(CommCallSpan(float(trace.ts[i]), float(trace.end[i]), call_kind,
                                           message_of(trace.args[i])))
    return calls


def _calls_open_at(calls: list[CommCallSpan], launches: list[tuple[float, int]]) -> dict[int, list[CommCallSpan]]:
    """Kernel → the calls of one thread open at its launch time, outermost first. One sweep in time order: the calls
    open at a launch form a stack (a thread's calls nest), innermost last."""
    ordered = sorted(calls, key=lambda call: (call.start, -call.end))
    stack: list[CommCallSpan] = []
    position = 0
    found: dict[int, list[CommCallSpan]] = {}
    for time, kernel in sorted(launches):
        while position < len(ordered) and ordered[position].start <= time:
            while stack and stack[-1].end < ordered[position].start:
                stack.pop()
            stack.append(ordered[position])
            position += 1
        while stack and stack[-1].end < time:
            stack.pop()
        enclosing = [call for call in stack if call.end >= time]
        if enclosing:
            found[kernel] = enclosing
    return found


def _innermost_message(enclosing: list[CommCallSpan]) -> tuple[int, str] | None:
    return next((call.message for call in reversed(enclosing) if call.message is not None), None)


def launch_messages(trace: TraceEvents, kernels: Iterable[EventIndex]) -> dict[int, tuple[int, str]]:
    """The message (bytes, dtype) of each kernel's launching communication call, where one records it."""
    found: dict[int, tuple[int, str]] = {}
    for kernel, enclosing in enclosing_calls(trace, kernels).items():
        message = _innermost_message(enclosing)
        if message is not None:
            found[kernel] = message
    return found


def message_of(args: object) -> tuple[int, str] | None:
    """(bytes, dtype) of a collective's message from its event arguments (record_param_comms' or an NCCL kernel's
    copy of them): the larger of its input and output element counts times the element size."""
    if not isinstance(args, dict) or "In msg nelems" not in args:
        return None
    elements = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
    dtype = str(args.get("dtype"))
    size = element_bytes(trace_dtype(dtype))
    return (elements * size, dtype) if size else None


def _message_bytes(args: object) -> int | None:
    message = message_of(args)
    return message[0] if message else None


def collective_kinds(trace: TraceEvents, classified: Classified, selected: np.ndarray,
                     kinds: Kinds | None = None) -> list[dict]:
    """Per kind of communication: how many, their summed duration, bytes where the trace records them (`sized`: over
    how many of them; fewer than `count` makes `bytes` a partial sum, never the missing ones as 0 B), and how many
    were NCCL Generic kernels (attributed to their collective; kind GENERIC with `unattributed` when none was
    found)."""
    if kinds is None:
        kinds = event_kinds(trace, classified)
    totals: dict[str, dict] = defaultdict(lambda: {"count": 0, "total_us": 0.0, "bytes": None, "sized": 0,
                                                   "generic_kernels": 0})
    for i in np.flatnonzero(classified.comm & selected):
        entry = totals[kinds.kind[i]]
        entry["count"] += 1
        entry["total_us"] += max(0.0, float(trace.end[i] - trace.ts[i]))  # sub-µs events can round to < 0
        entry["generic_kernels"] += int(kinds.generic[i])
        message = _message_bytes(trace.args[i])
        if message is None:
            message = kinds.launcher_bytes.get(i)
        if message is not None:
            entry["bytes"] = (entry["bytes"] or 0) + message
            entry["sized"] += 1
    return [{"kind": kind, **values, "unattributed": classified.device == "gpu" and kind == GENERIC}
            for kind, values in sorted(totals.items())]
