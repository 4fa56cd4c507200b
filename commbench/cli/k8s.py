"""`commbench k8s SUITE`: a Kubeflow Trainer TrainJob (or a JobSet) manifest that runs a suite on Kubernetes."""

from pathlib import Path

import click

from commbench.cli.suites import complete_suite
from commbench.k8s.resources import DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_PER_GPU


@click.command(name="k8s")
@click.argument("suite", shell_complete=complete_suite)
@click.option("--nodes", type=int, required=True,
              help="Pods, each running one torchrun (one per node where each takes a node's GPUs).")
@click.option("--gpus-per-node", type=int, required=True,
              help="GPUs per pod (nvidia.com/gpu), one rank each: torchrun's --nproc-per-node.")
@click.option("--image", required=True,
              help="Container image with commbench and torch installed (torchrun on its PATH).")
@click.option("--kind", type=click.Choice(["trainjob", "jobset"]), default="trainjob", show_default=True,
              help="A Kubeflow Trainer TrainJob, or a JobSet for clusters without the Trainer.")
@click.option("--runtime", default=None,
              help="The ClusterTrainingRuntime the TrainJob names (a torch one: it sets the PET_* variables "
                   "torchrun reads) [default: torch-distributed].")
@click.option("--namespace", default=None, help="metadata.namespace [default: kubectl's current namespace].")
@click.option("--queue", default=None, help="Kueue LocalQueue: adds the label kueue.x-k8s.io/queue-name.")
@click.option("--results-pvc", default=None, metavar="CLAIM",
              help="PersistentVolumeClaim mounted at /results in every pod; the run folder is /results/NAME "
                   "[default: an emptyDir, deleted with the pod: only the tables in the log remain].")
@click.option("--name", default=None,
              help="metadata.name and the run folder's name [default: commbench-<suite>-<UTC time>].")
@click.option("--cpus-per-gpu", default=DEFAULT_CPUS_PER_GPU, show_default=True, metavar="QUANTITY",
              help="CPUs each pod requests per GPU (a Kubernetes quantity: 8, 2.5, 2500m). At least 2 per rank "
                   "(its own thread, NCCL's proxy thread) plus 1 for torchrun; 8 x 8 GPUs = 64 fits a 96-thread "
                   "8-GPU node (p4d, ND H100 v5) after its system reservations, and a DGX H100's 224. A request, "
                   "no limit: no CPU quota throttles the ranks.")
@click.option("--memory-per-gpu", default=DEFAULT_MEMORY_PER_GPU, show_default=True, metavar="QUANTITY",
              help="Memory each pod requests per GPU (64Gi, 500G); 8 x 64Gi = 512Gi fits a p4d's 1152 GiB and a DGX "
                   "H100's 2 TiB after reservations. A request, no limit.")
@click.option("--rdma-resource", default=None, metavar="NAME",
              help="The RDMA device plugin's resource each pod asks for (a limit), e.g. rdma/ib (shared device "
                   "plugin) or nvidia.com/hostdev (SR-IOV) [default: none].")
@click.option("--rdma-count", type=int, default=None, metavar="N",
              help="Devices of --rdma-resource per pod [default: 1].")
@click.option("--ipc-lock/--no-ipc-lock", default=None,
              help="Add the IPC_LOCK capability, so NCCL can pin host memory and register it with an InfiniBand "
                   "NIC; Pod Security's baseline level refuses it [default: only with --rdma-resource].")
@click.option("--host-network", is_flag=True, default=False,
              help="Run the pods in their node's network namespace (hostNetwork: true, dnsPolicy: "
                   "ClusterFirstWithHostNet), for NICs the pod network does not reach; JobSet only.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="Write the manifest here [default: stdout].")
def k8s(suite: str, nodes: int, gpus_per_node: int, image: str, kind: str, runtime: str | None,
        namespace: str | None, queue: str | None, results_pvc: str | None, name: str | None, cpus_per_gpu: str,
        memory_per_gpu: str, rdma_resource: str | None, rdma_count: int | None, ipc_lock: bool | None,
        host_network: bool, out: Path | None) -> None:
    """Write a Kubernetes manifest that runs SUITE (a .toml file, or a shipped suite's name) on NODES pods of
    GPUS_PER_NODE GPUs: `commbench run SUITE` under torchrun in every pod, rank 0 writing the one run folder
    /results/NAME.

    A shipped suite is run by name from the image's commbench; a local suite file travels in a ConfigMap of the
    same YAML stream, mounted into the pods. The suite is loaded here as it will resolve on the job's nodes, so a bad
    suite is refused before anything is written. `kubectl apply -f FILE` starts it; docs/kubernetes.md says how to
    watch it and collect the run folder.

    Each pod requests GPUS_PER_NODE times --cpus-per-gpu and --memory-per-gpu, and where asked an RDMA device
    (with the IPC_LOCK capability, or IPC_LOCK alone with --ipc-lock) and its node's network (docs/kubernetes.md
    says why each).

    Exit codes: 0 written, 2 bad input (a name, count or quantity Kubernetes would refuse, too few CPUs for the
    ranks, an unknown or invalid suite).
    """
    from commbench.k8s.job import Pods, make_manifest

    pods = Pods(nodes=nodes, gpus_per_node=gpus_per_node, image=image, cpus_per_gpu=cpus_per_gpu,
                memory_per_gpu=memory_per_gpu, rdma_resource=rdma_resource, rdma_count=rdma_count,
                ipc_lock=ipc_lock, host_network=host_network)
    made = make_manifest(suite, pods, kind=kind, name=name, runtime=runtime, namespace=namespace, queue=queue,
                         results_pvc=results_pvc, out=out)
    if made.written is None:
        click.echo(made.text, nl=False)
        return
    where = f" -n {namespace}" if namespace else ""
    click.echo(f"# written: {made.written} ({made.request.kind} {made.request.name})\n# apply: kubectl{where} apply "
               f"-f {made.written}")
