"""`commbench k8s SUITE`'s work: the job's request checked, the suite loaded as the job's ranks will resolve it (a
local file then travels in the manifest's ConfigMap), the manifest rendered and (--out) written; the command prints
it or says where it went."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from commbench.batch.fields import check_text_field
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.k8s import manifest, pod


@dataclass(frozen=True)
class Pods:
    """What each pod runs on and asks for (the options of `commbench k8s` that shape the pods)."""

    nodes: int
    gpus_per_node: int
    image: str
    cpus_per_gpu: str
    memory_per_gpu: str
    rdma_resource: str | None = None
    rdma_count: int | None = None
    ipc_lock: bool | None = None
    """IPC_LOCK: True or False as asked; None, with an RDMA device only (resources.wants_ipc_lock)."""
    host_network: bool = False


@dataclass(frozen=True)
class Manifest:
    """The request the manifest renders, its YAML text, and the file it was written to (None: none, print it)."""

    request: manifest.JobRequest
    text: str
    written: Path | None


def make_manifest(suite: str, pods: Pods, *, kind: str, name: str | None, runtime: str | None,
                  namespace: str | None, queue: str | None, results_pvc: str | None, out: Path | None) -> Manifest:
    """The manifest that runs suite on the pods; refused (CommbenchError) before anything is written where a name,
    count or quantity Kubernetes would refuse, or the suite, is bad."""
    from commbench.machine import Machine
    from commbench.suite.load import load_suite

    check_text_field("SUITE", suite)
    if out is not None:
        check_text_field("--out", str(out))
    request = manifest.JobRequest(
        kind=kind, name=name if name is not None else manifest.default_name(suite, max(pods.nodes, 1),
                                                                            datetime.now(timezone.utc)),
        nodes=pods.nodes, gpus_per_node=pods.gpus_per_node, image=pods.image, suite=pod.shipped(suite),
        suite_label=suite, runtime=runtime, namespace=namespace, queue=queue, results_pvc=results_pvc,
        cpus_per_gpu=pods.cpus_per_gpu, memory_per_gpu=pods.memory_per_gpu, rdma_resource=pods.rdma_resource,
        rdma_count=pods.rdma_count, ipc_lock=pods.ipc_lock, host_network=pods.host_network)
    manifest.validate(request)  # names and counts first: they cost nothing, the suite costs a load
    # the suite as every rank of the job will resolve it: nodes x GPUs ranks, one GPU each
    loaded = load_suite(suite, Machine.for_job(nodes=pods.nodes, ranks_per_node=pods.gpus_per_node,
                                               gpus_per_node=pods.gpus_per_node))
    if Path(suite).is_file():  # what load_suite took as a file, not as a shipped name
        request = replace(request, suite=pod.local_file(Path(suite), loaded.text))
    text = manifest.render(request)
    if results_pvc is None:
        warnings.warn(f"no --results-pvc: the run folder {pod.RESULTS_MOUNT}/{request.run_id} lives in rank 0's "
                      "pod's emptyDir and goes with the pod; only the tables in `kubectl logs` remain. Pass "
                      "--results-pvc CLAIM to keep it", CommbenchWarning, stacklevel=1)
    if out is not None:
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as error:
            raise CommbenchError(f"cannot write --out {out}: {error.strerror or error}; choose a writable file"
                                 ) from None
    return Manifest(request, text, out)
