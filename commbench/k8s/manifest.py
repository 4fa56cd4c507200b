"""The manifest `commbench k8s` writes: a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1) or a JobSet
(jobset.x-k8s.io/v1alpha2) that runs a suite on N nodes of G GPUs, after the suite's ConfigMap where the suite is a
local file; one YAML stream, headed by comments that say how to apply it and where the results go.

TrainJob: the runtime's torch policy gives the trainer container PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
PET_MASTER_ADDR and PET_MASTER_PORT, and torchrun reads its options from exactly those (torch's `env` argparse
action); the Trainer does not wrap the command in torchrun, so the command is torchrun itself, with no topology
options. The volumes go in through runtimePatches (the TrainJob's trainer has no volume field), merged into the
runtime's `node` replicated job by container and volume name.

JobSet: one replicated job `node` of N indexed pods; each pod's torchrun is told the topology on its command line,
its node rank from its completion index, and meets the others at pod 0's stable hostname,
<name>-node-0-0.<name> (JobSet's headless Service, subdomain = the JobSet's name).
"""

from dataclasses import dataclass
from datetime import datetime

import yaml

from commbench import __version__
from commbench.errors import CommbenchError
from commbench.k8s import names, pod, resources

TRAINJOB, JOBSET = "trainjob", "jobset"
KINDS = (TRAINJOB, JOBSET)
DEFAULT_RUNTIME = "torch-distributed"
TRAINER_GROUP = "trainer.kubeflow.org"
TRAINJOB_API = f"{TRAINER_GROUP}/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
RUNTIME_KIND = "ClusterTrainingRuntime"
PATCH_MANAGER = "commbench"
"""runtimePatches are keyed by who wrote them (Kueue writes its own beside this one)."""
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""On every pod of the JobSet, and of the JobSet the Trainer makes for a TrainJob (same name)."""
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"
COMPLETION_INDEX_FIELD = f"metadata.annotations['{COMPLETION_INDEX_LABEL}']"
"""The Job controller sets it on each pod of an indexed Job; the Trainer reads PET_NODE_RANK from the same field."""
TORCHRUN = "torchrun"


@dataclass(frozen=True)
class JobRequest:
    kind: str
    name: str
    """metadata.name, and the run folder's name under /results."""
    nodes: int
    gpus_per_node: int
    image: str
    suite: pod.SuiteSource
    suite_label: str
    """The SUITE the user gave (for the header)."""
    runtime: str | None = None
    """The TrainJob's ClusterTrainingRuntime; None: DEFAULT_RUNTIME (and none for a JobSet)."""
    namespace: str | None = None
    queue: str | None = None
    results_pvc: str | None = None
    cpus_per_gpu: str = resources.DEFAULT_CPUS_PER_GPU
    """A Kubernetes quantity; the pod requests G times it."""
    memory_per_gpu: str = resources.DEFAULT_MEMORY_PER_GPU
    rdma_resource: str | None = None
    """An RDMA device plugin's extended resource (rdma/ib, nvidia.com/hostdev), or none."""
    rdma_count: int | None = None
    """Devices of rdma_resource per pod; None: 1 where rdma_resource is given."""
    ipc_lock: bool | None = None
    """The IPC_LOCK capability: as asked, or None: where the pod asks for rdma_resource (resources.wants_ipc_lock)."""
    host_network: bool = False

    @property
    def run_id(self) -> str:
        return self.name


def validate(request: JobRequest) -> None:
    """Everything the API server, the Trainer or the JobSet webhook would refuse, in the order the options read."""
    if request.kind not in KINDS:
        raise CommbenchError(f"--kind {request.kind!r} is not a kind commbench writes; choose {' or '.join(KINDS)}")
    names.check_count("--nodes", request.nodes)
    names.check_count("--gpus-per-node", request.gpus_per_node)
    pod_ask(request)
    if request.host_network and request.kind == TRAINJOB:
        # the TrainJob's runtimePatches patch a pod's containers, volumes and scheduling, not its network
        raise CommbenchError("--host-network needs --kind jobset: a TrainJob cannot set hostNetwork (its "
                             "runtimePatches have no such field); or name with --runtime a ClusterTrainingRuntime "
                             f"whose pod sets hostNetwork: true and dnsPolicy: {resources.HOST_NETWORK_DNS_POLICY}")
    names.check_image(request.image)
    names.check_job_name("--name", request.name, nodes=request.nodes)
    if request.runtime is not None:
        if request.kind == JOBSET:
            raise CommbenchError(f"--runtime {request.runtime!r} names a Kubeflow Trainer runtime, which a JobSet "
                                 "does not use; drop --runtime or write a TrainJob (--kind trainjob)")
        names.check_subdomain("--runtime", request.runtime, what="a ClusterTrainingRuntime name")
    if request.namespace is not None:
        names.check_label("--namespace", request.namespace, what="a namespace name")
    if request.queue is not None:
        # a LocalQueue's name, held in a label value: a subdomain that also fits a label value's 63 characters
        names.check_subdomain("--queue", request.queue, what="a Kueue LocalQueue name", max_length=names.LABEL_MAX)
    if request.results_pvc is not None:
        names.check_subdomain("--results-pvc", request.results_pvc, what="a PersistentVolumeClaim name")


def pod_ask(request: JobRequest) -> resources.PodAsk:
    """What each pod asks of its node (refused in one line where Kubernetes or the ranks could not take it)."""
    return resources.pod_ask(gpus=request.gpus_per_node, cpus_per_gpu=request.cpus_per_gpu,
                             memory_per_gpu=request.memory_per_gpu, rdma_resource=request.rdma_resource,
                             rdma_count=request.rdma_count, ipc_lock=request.ipc_lock,
                             host_network=request.host_network)


def default_name(suite_label: str, nodes: int, now: datetime) -> str:
    """commbench-<suite>-<UTC time>: a new name (and run folder) for every manifest written, cut to fit `nodes`."""
    stamp = f"{now:%Y%m%d-%H%M%S}"
    room = names.job_name_max(nodes) - len("commbench--") - len(stamp)
    stem = names.as_label(suite_label.rsplit("/", 1)[-1].removesuffix(".toml"), max_length=max(room, 0))
    return f"commbench-{stem}-{stamp}" if stem else f"commbench-{stamp}"


def master_host(name: str) -> str:
    """Pod 0's stable hostname: <jobset>-<replicated job>-<job index>-<pod index>.<subdomain>."""
    return f"{name}-{pod.CONTAINER}-0-0.{name}"


def documents(request: JobRequest) -> list[dict]:
    """The YAML stream's objects, the suite's ConfigMap (if any) first so it exists when the pods start."""
    validate(request)
    job = trainjob(request) if request.kind == TRAINJOB else jobset(request)
    configmap = pod.suite_configmap(request.suite, job_name=request.name, metadata=_namespace(request))
    return [configmap, job] if configmap is not None else [job]


def trainjob(request: JobRequest) -> dict:
    ask = pod_ask(request)
    patched_container: dict = {"name": pod.CONTAINER, "volumeMounts": pod.volume_mounts(request.suite)}
    if resources.security_context(ask):
        patched_container["securityContext"] = resources.security_context(ask)
    patched_pod = {"volumes": _volumes(request), "containers": [patched_container]}
    return {
        "apiVersion": TRAINJOB_API, "kind": "TrainJob", "metadata": _metadata(request),
        "spec": {
            "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": RUNTIME_KIND,
                           "name": request.runtime or DEFAULT_RUNTIME},
            "trainer": {
                "image": request.image,
                # torchrun takes --nnodes, --nproc-per-node, --node-rank and the master from the PET_* variables
                "command": [TORCHRUN, *pod.commbench_args(request.suite, request.run_id)],
                "numNodes": request.nodes,
                "numProcPerNode": request.gpus_per_node,
                "resourcesPerNode": resources.requirements(ask),
            },
            "runtimePatches": [{
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
                    "name": pod.CONTAINER,
                    "template": {"spec": {"template": {"spec": patched_pod}}}}]}}},
            }],
        },
    }


def jobset(request: JobRequest) -> dict:
    ask = pod_ask(request)
    command = [TORCHRUN, f"--nnodes={request.nodes}", f"--nproc-per-node={request.gpus_per_node}",
               # $(VAR) is expanded by the kubelet from the container's env: no shell in the pod
               f"--node-rank=$({COMPLETION_INDEX_ENV})", f"--master-addr={master_host(request.name)}",
               f"--master-port={pod.MASTER_PORT}", *pod.commbench_args(request.suite, request.run_id)]
    container = {
        "name": pod.CONTAINER, "image": request.image, "command": command,
        # the Job controller adds this variable too; declared here, the $(...) above resolves on any version
        "env": [{"name": COMPLETION_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX_FIELD}}}],
        "ports": [{"containerPort": pod.MASTER_PORT, "name": "rendezvous"}],
        "resources": resources.requirements(ask),
        "volumeMounts": pod.volume_mounts(request.suite),
    }
    if resources.security_context(ask):
        container["securityContext"] = resources.security_context(ask)
    return {
        "apiVersion": JOBSET_API, "kind": "JobSet", "metadata": _metadata(request),
        "spec": {
            # a restart would run the suite again into the run folder it already filled, which commbench refuses
            "failurePolicy": {"maxRestarts": 0},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": request.name},
            "replicatedJobs": [{
                "name": pod.CONTAINER, "replicas": 1,
                "template": {"spec": {
                    "parallelism": request.nodes, "completions": request.nodes, "completionMode": "Indexed",
                    "backoffLimit": 0,
                    "template": {"spec": {"restartPolicy": "Never", **resources.network_fields(ask),
                                          "containers": [container], "volumes": _volumes(request)}},
                }},
            }],
        },
    }


def render(request: JobRequest) -> str:
    """The manifest as kubectl reads it: comment lines, then one YAML document per object."""
    stream = yaml.dump_all(documents(request), Dumper=_Dumper, sort_keys=False, explicit_start=True,
                           allow_unicode=True, width=120)
    return "".join(f"# {line}\n" if line else "#\n" for line in header(request)) + stream


def header(request: JobRequest) -> list[str]:
    what = "Kubeflow Trainer TrainJob" if request.kind == TRAINJOB else "JobSet"
    pods = f"{JOBSET_NAME_LABEL}={request.name}"
    where = f" -n {request.namespace}" if request.namespace else ""
    lines = [f"commbench k8s {__version__}: suite {request.suite_label} as a {what} {request.name}, "
             f"{request.nodes} node(s) x {request.gpus_per_node} GPU(s), image {request.image}",
             f"each pod asks: {resources.summary(pod_ask(request))}",
             f"apply: kubectl{where} apply -f <this file>   (docs/kubernetes.md)",
             f"watch: kubectl{where} get {request.kind} {request.name} -w; "
             f"kubectl{where} get pods -l {pods}",
             f"rank 0's tables: kubectl{where} logs -f -l {pods},{COMPLETION_INDEX_LABEL}=0"]
    if request.results_pvc is not None:
        lines.append(f"results: {pod.RESULTS_MOUNT}/{request.run_id} on PersistentVolumeClaim {request.results_pvc}"
                     " (every pod mounts it: ReadWriteMany where the pods run on several nodes)")
    else:
        lines.append(f"results: {pod.RESULTS_MOUNT}/{request.run_id} in rank 0's pod's emptyDir, gone with the "
                     "pod: only the tables in its log remain (--results-pvc keeps the run folder)")
    if request.queue is not None:
        lines.append(f"Kueue: admitted through LocalQueue {request.queue}")
    return lines


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (a suite's TOML) as literal blocks, which read as the file; PyYAML falls back to a quoted
    scalar by itself where a block cannot hold the text exactly (trailing spaces, control characters)."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _string)


def _metadata(request: JobRequest) -> dict:
    metadata: dict = {"name": request.name, **_namespace(request)}
    if request.queue is not None:
        metadata["labels"] = {QUEUE_LABEL: request.queue}
    return metadata


def _namespace(request: JobRequest) -> dict:
    return {"namespace": request.namespace} if request.namespace is not None else {}


def _volumes(request: JobRequest) -> list[dict]:
    return pod.volumes(results_pvc=request.results_pvc, suite=request.suite, job_name=request.name)
