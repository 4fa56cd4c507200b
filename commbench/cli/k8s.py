"""`commbench k8s SUITE`: a Kubeflow Trainer TrainJob (or a JobSet) manifest that runs a suite on Kubernetes."""

import warnings
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import click

from commbench.cli.suites import complete_suite


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
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="Write the manifest here [default: stdout].")
def k8s(suite, nodes, gpus_per_node, image, kind, runtime, namespace, queue, results_pvc, name, out) -> None:
    """Write a Kubernetes manifest that runs SUITE (a .toml file, or a shipped suite's name) on NODES pods of
    GPUS_PER_NODE GPUs: `commbench run SUITE` under torchrun in every pod, rank 0 writing the one run folder
    /results/NAME.

    A shipped suite is run by name from the image's commbench; a local suite file travels in a ConfigMap of the
    same YAML stream, mounted into the pods. The suite is loaded here as it will resolve on the job's nodes, so a bad
    suite is refused before anything is written. `kubectl apply -f FILE` starts it; docs/kubernetes.md says how to
    watch it and collect the run folder.

    Exit codes: 0 written, 2 bad input (a name or count Kubernetes would refuse, an unknown or invalid suite).
    """
    from commbench.errors import CommbenchError, CommbenchWarning
    from commbench.k8s import manifest, pod
    from commbench.machine import Machine
    from commbench.slurm.script import check_text_field
    from commbench.suite.load import load_suite

    check_text_field("SUITE", suite)
    if out is not None:
        check_text_field("--out", str(out))
    request = manifest.JobRequest(
        kind=kind, name=name if name is not None else manifest.default_name(suite, max(nodes, 1),
                                                                            datetime.now(timezone.utc)),
        nodes=nodes, gpus_per_node=gpus_per_node, image=image, suite=pod.shipped(suite), suite_label=suite,
        runtime=runtime, namespace=namespace, queue=queue, results_pvc=results_pvc)
    manifest.validate(request)  # names and counts first: they cost nothing, the suite costs a load
    # the suite as every rank of the job will resolve it: nodes x GPUs ranks, one GPU each
    loaded = load_suite(suite, Machine.for_job(nodes=nodes, ranks_per_node=gpus_per_node,
                                               gpus_per_node=gpus_per_node))
    if Path(suite).is_file():  # what load_suite took as a file, not as a shipped name
        request = replace(request, suite=pod.local_file(Path(suite), loaded.text))
    text = manifest.render(request)
    if results_pvc is None:
        warnings.warn(f"no --results-pvc: the run folder {pod.RESULTS_MOUNT}/{request.run_id} lives in rank 0's "
                      "pod's emptyDir and goes with the pod; only the tables in `kubectl logs` remain. Pass "
                      "--results-pvc CLAIM to keep it", CommbenchWarning, stacklevel=1)
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as error:
        raise CommbenchError(f"cannot write --out {out}: {error.strerror or error}; choose a writable file") from None
    where = f" -n {namespace}" if namespace else ""
    click.echo(f"# written: {out} ({request.kind} {request.name})\n# apply: kubectl{where} apply -f {out}")

