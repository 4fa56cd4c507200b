"""Communication vs computation in a trace: overlap %, exposed communication, idle time, per step and per kind.

GPU traces follow Holistic Trace Analysis: kernels named like NCCL are communication, memcpy/memset are neither,
every other kernel is computation, and a kernel belongs to the time (step) of the CPU call that launched it. CPU
(gloo) traces have no kernels: communication is the gloo:* spans of gloo's threads, computation the main thread's
aten:: ops. Overlap % = |comm ∩ comp| / |comm|; exposed communication = |comm| − |comm ∩ comp|.
"""

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

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
_ELEMENT_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Short": 2, "Byte": 1,
                  "Char": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


@dataclass
class Classified:
    """Which events are communication or computation, and the time that places each event in a step."""

    device: str  # "gpu" or "cpu"
    comm: np.ndarray  # bool per event
    comp: np.ndarray  # bool per event
    owner_ts: np.ndarray  # GPU: the launching CPU call's start; CPU: the event's own start; NaN = unplaced
    steps: list[tuple[int, float, float]]  # (step number, start, end) of each ProfilerStep window


def classify(trace: TraceEvents) -> Classified:
    gpu_side = ((trace.stream >= 0) & (trace.correlation >= 0)) | np.isin(trace.name, list(_GPU_SYNC_EVENTS))
    cpu_side = ~gpu_side
    steps = sorted((int(match.group(1)), trace.ts[i], trace.end[i])
                   for i in np.flatnonzero(cpu_side) if (match := PROFILER_STEP.match(trace.name[i])))
    if gpu_side.any():
        return _classify_gpu(trace, gpu_side, cpu_side, steps)
    return _classify_cpu(trace, steps)


def _classify_gpu(trace, gpu_side, cpu_side, steps) -> Classified:
    launch_ts: dict[int, float] = {}
    for i in np.flatnonzero(cpu_side & (trace.correlation >= 0)):
        launch_ts.setdefault(int(trace.correlation[i]), trace.ts[i])
    owner_ts = trace.ts.copy()
    for i in np.flatnonzero(gpu_side):
        owner_ts[i] = launch_ts.get(int(trace.correlation[i]), math.nan)  # no launching CPU call: HTA drops it
    comm = np.zeros(len(trace), dtype=bool)
    comp = np.zeros(len(trace), dtype=bool)
    for i in np.flatnonzero(trace.stream != -1):  # only device events: names are matched once each
        name = trace.name[i]
        if COMM_KERNEL.match(name):
            comm[i] = True
        elif not MEMORY_KERNEL.match(name) and not NOT_COMPUTE_KERNEL.match(name):
            comp[i] = True
    return Classified("gpu", comm, comp, owner_ts, steps)


def _classify_cpu(trace, steps) -> Classified:
    comm = (trace.cat == "user_annotation") & np.array([name.startswith("gloo:") for name in trace.name], dtype=bool)
    aten = (trace.cat == "cpu_op") & np.array([name.startswith("aten::") for name in trace.name], dtype=bool)
    step_threads = [trace.tid[i] for i in range(len(trace)) if PROFILER_STEP.match(trace.name[i])]
    threads = Counter(step_threads) or Counter(trace.tid[aten])
    main_thread = threads.most_common(1)[0][0] if threads else None
    comp = aten & np.array([tid == main_thread for tid in trace.tid], dtype=bool)
    return Classified("cpu", comm, comp, trace.ts.copy(), steps)


def window_metrics(trace: TraceEvents, classified: Classified, selected: np.ndarray) -> dict:
    """Times (µs) of the selected events: unions, their overlap, exposed communication and idle time."""
    comm_mask, comp_mask = classified.comm & selected, classified.comp & selected
    comm = intervals.merge(trace.ts[comm_mask], trace.end[comm_mask])
    comp = intervals.merge(trace.ts[comp_mask], trace.end[comp_mask])
    comm_us, compute_us = intervals.total(*comm), intervals.total(*comp)
    overlap_us = intervals.intersection_length(comm, comp)
    either = comm_mask | comp_mask
    busy_us = intervals.total(*intervals.merge(trace.ts[either], trace.end[either]))
    span_us = float(trace.end[either].max() - trace.ts[either].min()) if either.any() else 0.0
    return {
        "comm_us": comm_us,
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
    result = {"path": trace.path, "rank": trace.rank, "world_size": trace.world_size, "backend": trace.backend,
              "device": classified.device}
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
    result["collectives"] = collective_kinds(trace, classified, whole)
    return result


def _kind(name: str, device: str) -> str:
    if device == "cpu":
        return name.removeprefix("gloo:")
    match = _NCCL_KIND.search(name)
    return match.group(1) if match else name.split("(")[0]


def _message_bytes(args) -> int | None:
    if not isinstance(args, dict) or "In msg nelems" not in args:
        return None
    elements = max(int(args.get("In msg nelems") or 0), int(args.get("Out msg nelems") or 0))
    element_bytes = _ELEMENT_BYTES.get(str(args.get("dtype")))
    return elements * element_bytes if element_bytes else None


def collective_kinds(trace: TraceEvents, classified: Classified, selected: np.ndarray) -> list[dict]:
    """Per kind of communication: how many, their summed duration, and bytes where the trace records them."""
    kinds: dict[str, dict] = defaultdict(lambda: {"count": 0, "total_us": 0.0, "bytes": None})
    for i in np.flatnonzero(classified.comm & selected):
        entry = kinds[_kind(trace.name[i], classified.device)]
        entry["count"] += 1
        entry["total_us"] += max(0.0, float(trace.end[i] - trace.ts[i]))  # sub-µs events can round to < 0
        message = _message_bytes(trace.args[i])
        if message is not None:
            entry["bytes"] = (entry["bytes"] or 0) + message
    return [{"kind": kind, **values} for kind, values in sorted(kinds.items())]


def skew(traces: list[TraceEvents]) -> list[dict]:
    """Start-time spread of the same collective across ranks: the k-th event of a kind on every rank is one
    collective. Needs the ranks' clocks to agree (one host, or synchronised hosts)."""
    starts_by_key: dict[tuple[str, int], list[float]] = defaultdict(list)
    for trace in traces:
        classified = classify(trace)
        seen: Counter = Counter()
        for i in np.flatnonzero(classified.comm)[np.argsort(trace.ts[classified.comm], kind="stable")]:
            kind = _kind(trace.name[i], classified.device)
            starts_by_key[(kind, seen[kind])].append(float(trace.ts[i]))
            seen[kind] += 1
    per_kind: dict[str, list[float]] = defaultdict(list)
    for (kind, _), starts in starts_by_key.items():
        if len(starts) == len(traces):
            per_kind[kind].append(max(starts) - min(starts))
    return [{"kind": kind, "matched": len(values), "skew_us_mean": float(np.mean(values)),
             "skew_us_max": float(np.max(values))} for kind, values in sorted(per_kind.items())]
