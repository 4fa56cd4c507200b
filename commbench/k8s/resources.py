"""What one pod asks of its node, whichever kind holds it: its GPUs, CPUs and memory, an RDMA device where the
cluster has one, the IPC_LOCK capability with that device or where asked, and host networking where asked.

Requests and limits. CPU and memory are requests only: the scheduler reserves them on the node, and no limit means no
CFS quota throttling a rank's threads between the timer's reads (a throttled NCCL proxy thread shows up as a slow
collective) and no OOM kill of a rank that briefly goes over. GPUs and the RDMA device are extended resources, which
Kubernetes does not overcommit: their request must equal their limit, and a limit alone sets both.

The defaults fit an 8-GPU node of any common make after the kubelet's and the system's reservations and the
DaemonSets every GPU node runs (device plugin, GPU and network operators, monitoring):

| node | GPUs | CPUs (threads) | memory | 8 x the defaults |
| --- | --- | --- | --- | --- |
| DGX H100 | 8 | 224 (2 x 56 cores) | 2 TiB | 64 CPUs, 512 GiB |
| AWS p5.48xlarge | 8 | 192 | 2 TiB | |
| AWS p4d.24xlarge, Azure ND96isr H100 v5 | 8 | 96 | 1152 GiB, 1900 GiB | |

The 96-thread nodes bound the CPU default: 8 per GPU leaves 32 of 96 for the node's own reservations and DaemonSets.
"""

from dataclasses import dataclass

from commbench.errors import CommbenchError
from commbench.k8s import names, quantity
from commbench.machine import CPUS_PER_LOCAL_RANK

GPU_RESOURCE = "nvidia.com/gpu"
"""The NVIDIA device plugin's resource: one GPU each."""
DEFAULT_CPUS_PER_GPU = "8"
"""8 CPUs per GPU: 64 for an 8-GPU pod, which the 96-thread 8-GPU nodes (p4d, ND H100 v5) hold with 32 to spare for
the kubelet, the system and the DaemonSets, and a DGX H100 (224 threads) with 160. A rank needs MIN_CPUS_PER_RANK;
the rest is headroom for its other threads (the NVML sampler, gloo's I/O threads, the profiler) and a training
bench's host-side work."""
DEFAULT_MEMORY_PER_GPU = "64Gi"
"""64 GiB per GPU: 512 GiB for an 8-GPU pod, under a p4d's 1152 GiB and a DGX H100's 2 TiB after reservations. A rank
holds torch, its CUDA context's host side, pinned staging buffers and a training bench's model before it moves to the
GPU; the memory-backed /dev/shm of the pod (NCCL's shared-memory transport) counts against the pod's memory too."""
MIN_CPUS_PER_RANK = CPUS_PER_LOCAL_RANK
"""A rank's own thread (it issues and times the calls) and its backend's (NCCL's proxy thread, which drives the
network): the figure below which commbench, inside the pod, warns that its times measure the scheduler too."""
TORCHRUN_CPUS = 1
"""torchrun's agent, which watches its ranks for the whole run."""
IPC_LOCK = "IPC_LOCK"
"""Lets the ranks lock memory beyond the container's RLIMIT_MEMLOCK: NCCL pins host memory and registers it with the
InfiniBand NIC (ibv_reg_mr), which fails, or falls back to sockets, without it. Added by default only to a pod that
asks for an RDMA device: without one NCCL registers nothing, and Pod Security's baseline level refuses the pod."""
HOST_NETWORK_DNS_POLICY = "ClusterFirstWithHostNet"
"""Under hostNetwork the pod resolves names as its node does unless dnsPolicy says otherwise; this keeps the
cluster's DNS, which the JobSet's rendezvous host (pod 0's name under the JobSet's headless Service) needs."""


@dataclass(frozen=True)
class PodAsk:
    """One pod's share of a node: G GPUs, and CPUs and memory G times the per-GPU figures."""

    gpus: int
    cpu_millis: int
    memory_bytes: int
    rdma_resource: str | None = None
    rdma_count: int = 0
    ipc_lock: bool = False
    host_network: bool = False


def pod_ask(*, gpus: int, cpus_per_gpu: str, memory_per_gpu: str, rdma_resource: str | None, rdma_count: int | None,
            ipc_lock: bool | None, host_network: bool) -> PodAsk:
    """The pod's ask from the per-GPU options, refused in one line naming the option where Kubernetes would refuse
    it or commbench's ranks could not run in it. ipc_lock None: IPC_LOCK where the pod asks for an RDMA device
    (wants_ipc_lock)."""
    ipc_lock = wants_ipc_lock(ipc_lock, rdma_resource=rdma_resource)
    cpu_each = quantity.cpu_millis("--cpus-per-gpu", cpus_per_gpu, example=DEFAULT_CPUS_PER_GPU)
    cpu_millis = cpu_each * gpus
    needed = (MIN_CPUS_PER_RANK * gpus + TORCHRUN_CPUS) * quantity.MILLI
    if cpu_millis < needed:
        least = -(-needed // gpus)  # per GPU, rounded up to a millicore
        raise CommbenchError(
            f"--cpus-per-gpu {cpus_per_gpu} gives a pod of {gpus} rank(s) {quantity.cores_text(cpu_millis)} CPUs; "
            f"each rank needs {MIN_CPUS_PER_RANK} (its own thread and NCCL's proxy thread) and torchrun "
            f"{TORCHRUN_CPUS}, {quantity.cores_text(needed)} in all: give --cpus-per-gpu "
            f"{quantity.cores_text(least)} or more (default {DEFAULT_CPUS_PER_GPU})")
    memory_each = quantity.memory_bytes("--memory-per-gpu", memory_per_gpu, example=DEFAULT_MEMORY_PER_GPU)
    if memory_each == 0:
        raise CommbenchError(f"--memory-per-gpu {memory_per_gpu} asks for no memory; give what a rank needs, e.g. "
                             f"--memory-per-gpu {DEFAULT_MEMORY_PER_GPU} (the default)")
    if rdma_resource is None:
        if rdma_count is not None:
            raise CommbenchError(f"--rdma-count {rdma_count} counts devices of --rdma-resource, which is not given: "
                                 "add --rdma-resource NAME (e.g. rdma/ib) or drop --rdma-count")
        return PodAsk(gpus=gpus, cpu_millis=cpu_millis, memory_bytes=memory_each * gpus, ipc_lock=ipc_lock,
                      host_network=host_network)
    names.check_extended_resource("--rdma-resource", rdma_resource, gpu_resource=GPU_RESOURCE)
    count = 1 if rdma_count is None else rdma_count
    if count < 1:
        raise CommbenchError(f"--rdma-count {count} is not a device count; use 1 or more (1 for a shared RDMA device "
                             "plugin, one per NIC for SR-IOV)")
    names.check_count("--rdma-count", count)
    return PodAsk(gpus=gpus, cpu_millis=cpu_millis, memory_bytes=memory_each * gpus, rdma_resource=rdma_resource,
                  rdma_count=count, ipc_lock=ipc_lock, host_network=host_network)


def wants_ipc_lock(asked: bool | None, *, rdma_resource: str | None) -> bool:
    """IPC_LOCK as asked (--ipc-lock, --no-ipc-lock), else only with an RDMA device: the NIC's memory registration
    is what needs it, and a pod without the capability stays admissible under Pod Security's baseline level."""
    return rdma_resource is not None if asked is None else asked


def requirements(ask: PodAsk) -> dict:
    """The container's resources (a TrainJob's resourcesPerNode): CPU and memory requested, GPUs and the RDMA device
    as limits (their request follows their limit)."""
    limits: dict = {GPU_RESOURCE: ask.gpus}
    if ask.rdma_resource is not None:
        limits[ask.rdma_resource] = ask.rdma_count
    return {"requests": {"cpu": quantity.cpu_text(ask.cpu_millis), "memory": quantity.memory_text(ask.memory_bytes)},
            "limits": limits}


def security_context(ask: PodAsk) -> dict:
    """The container's securityContext: IPC_LOCK added (nothing else), or nothing."""
    return {"capabilities": {"add": [IPC_LOCK]}} if ask.ipc_lock else {}


def network_fields(ask: PodAsk) -> dict:
    """The pod spec's hostNetwork and dnsPolicy where host networking is asked for, else nothing."""
    return {"hostNetwork": True, "dnsPolicy": HOST_NETWORK_DNS_POLICY} if ask.host_network else {}


def summary(ask: PodAsk) -> str:
    """One line for the manifest's header: what each pod asks."""
    parts = [f"{ask.gpus} GPU(s)", f"{quantity.cores_text(ask.cpu_millis)} CPUs",
             f"{quantity.memory_text(ask.memory_bytes)} memory"]
    if ask.rdma_resource is not None:
        parts.append(f"{ask.rdma_count} x {ask.rdma_resource}")
    if ask.ipc_lock:
        parts.append(IPC_LOCK)
    if ask.host_network:
        parts.append("the node's network (hostNetwork)")
    return ", ".join(parts)
