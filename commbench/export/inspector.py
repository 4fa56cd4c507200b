"""NVIDIA NCCL Inspector's Prometheus vocabulary (NVIDIA/nccl plugins/profiler/inspector: inspector_prom.cc, the
collective names of inspector.cc's ncclFuncToString, NCCL's ncclAlgoToString / ncclProtoToString for algo_proto),
and how a commbench row maps onto it, so that NVIDIA's Grafana template
(grafana/nccl-inspector-job-performance-template.json) draws commbench's measurements as it draws a live job's.

The template's queries filter on collective ("AllReduce", "AllGather", "ReduceScatter"), n_nodes ("1" = NVLink
only, else network), slurm_job_id and cluster (a label Prometheus adds from its scrape configuration, not the
Inspector), and average by message_size, nranks and n_nodes."""

from commbench.names import NCCL, NCCL_FUNCTIONS
from commbench.sweep.env_axes import NCCL_ALGO, NCCL_PROTO, parse_label

BUS_BANDWIDTH = "nccl_bus_bandwidth_gbs"
EXEC_TIME = "nccl_collective_exec_time_microseconds"
UNKNOWN = "unknown"
"""What the Inspector writes for a label it cannot fill (no SLURM_JOB_ID, no algorithm in the event, ...)."""

ALGORITHMS = {"tree": "TREE", "ring": "RING", "collnetdirect": "COLLNET_DIRECT", "collnetchain": "COLLNET_CHAIN",
              "nvls": "NVLS", "nvlstree": "NVLS_TREE", "pat": "PAT"}
"""NCCL_ALGO's values (NCCL reads them case-insensitively) → the name NCCL gives the profiler (ncclAlgoToString)."""
PROTOCOLS = {"ll": "LL", "ll128": "LL128", "simple": "SIMPLE"}
"""NCCL_PROTO's values → ncclProtoToString's names."""
_UNITS = ("B", "KB", "MB", "GB", "TB")


def collective_name(collective: str) -> str:
    """commbench's collective as the Inspector spells it (names.NCCL_FUNCTIONS); one NCCL has no function of its own
    for (nccl-tests' gather, scatter, alltoallv, hypercube, in imported runs) keeps commbench's name."""
    return NCCL_FUNCTIONS.get(collective, collective)


def message_size(size_bytes: int) -> str:
    """The Inspector's bucket of a message size (inspectorPromFormatMessageSizeRange): the size in the largest
    1024-based unit (at most TB) that leaves at least 1, cut to a whole number N, written "N-(N+1)UNIT": 65536 →
    "64-65KB", 5 GiB → "5-6GB", 0 → "0B"."""
    if size_bytes <= 0:
        return "0B"
    value, unit = float(size_bytes), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    lower = max(int(value), 1)
    return f"{lower}-{lower + 1}{_UNITS[unit]}"


def algo_proto(env_label: str, backend: str) -> str:
    """The algorithm and protocol a row's environment forced on NCCL, as the Inspector writes them ("RING_SIMPLE");
    "unknown" for a part the environment leaves to NCCL (or lists several values for), and for every part on
    another backend (gloo ignores NCCL_ALGO)."""
    environment = parse_label(env_label) if backend == NCCL else {}
    algorithm = ALGORITHMS.get(environment.get(NCCL_ALGO, "").strip().lower(), UNKNOWN)
    protocol = PROTOCOLS.get(environment.get(NCCL_PROTO, "").strip().lower(), UNKNOWN)
    return f"{algorithm}_{protocol}"
