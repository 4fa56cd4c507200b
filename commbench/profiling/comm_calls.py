"""The collectives a process issued, read from the c10d operator events of its trace (recorded with shapes).

Every backend's collective goes through a c10d operator (c10d::allreduce_, c10d::_allgather_base_, …) on the
calling thread, and with record_shapes the trace keeps its tensor dimensions. That gives the message size in
elements, independent of dtype and backend; gloo's own spans cannot (its reduce-scatter shows as an all-reduce).
One gap: the list form of all-gather (c10d::allgather_, what FSDP1 uses on gloo) records its output list as empty,
so only its input is known; its message is input × group size when the caller knows the group, else unknown.
"""

import math
import re
from dataclasses import dataclass

from commbench.profiling.trace_file import TraceEvents

_KINDS = (
    (re.compile(r"^c10d::(allreduce|allreduce_coalesced)"), "all_reduce"),
    (re.compile(r"^c10d::(_allgather_base|allgather|allgather_into_tensor_coalesced)"), "all_gather"),
    (re.compile(r"^c10d::(_reduce_scatter_base|reduce_scatter)"), "reduce_scatter"),
    (re.compile(r"^c10d::broadcast"), "broadcast"),
    (re.compile(r"^c10d::(alltoall)"), "all_to_all"),
    (re.compile(r"^c10d::reduce_"), "reduce"),
)


@dataclass(frozen=True)
class CommCall:
    kind: str
    elements: int | None  # the larger of input and output; None when the trace has no shapes


def dims_elements(dims: object) -> int:
    """Elements of one argument's dims: [rows, cols] for a tensor, [[...], [...]] for a tensor list; 0 for what is
    neither (an argument without a shape)."""
    if not isinstance(dims, list) or not dims:
        return 0
    if isinstance(dims[0], list):
        return sum(dims_elements(inner) for inner in dims)
    return math.prod(value for value in dims if isinstance(value, int))


def comm_calls(trace: TraceEvents, *, gather_group_size: int | None = None) -> list[CommCall]:
    """Data-moving collectives in the trace, in order (barriers excluded: they carry no payload).
    gather_group_size: ranks in the group that all-gathers, for list all-gathers whose output is unrecorded."""
    calls = []
    for index in range(len(trace)):
        if trace.cat[index] != "cpu_op":
            continue
        name = trace.name[index]
        kind = next((kind for pattern, kind in _KINDS if pattern.match(name)), None)
        if kind is None:
            continue
        recorded = trace.args[index]
        args = recorded if isinstance(recorded, dict) else {}
        dims = args.get("Input Dims")
        elements = None
        if isinstance(dims, list) and dims:
            sizes = [dims_elements(arg) for arg in dims]
            elements = max(sizes)
            if kind == "all_gather" and len(sizes) > 1 and sizes[0] == 0:  # the output list went unrecorded
                elements = sizes[1] * gather_group_size if gather_group_size else None
        calls.append(CommCall(kind, elements))
    return calls
