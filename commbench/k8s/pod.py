"""What every pod of the job runs, whichever kind holds it: torchrun around `commbench run SUITE`, the volume the run
folder goes to, the suite's ConfigMap where the suite is a local file, and a memory-backed /dev/shm.

In the pod commbench runs in place, as it does under plain torchrun (docs/slurm.md): torchrun sets RANK and
WORLD_SIZE, every rank runs the suite, and rank 0, on node rank 0 (the pod of completion index 0), creates and fills
the one run folder /results/<run-id>; the other ranks write nothing.
"""

from dataclasses import dataclass
from pathlib import Path

from commbench.errors import CommbenchError
from commbench.k8s import names

CONTAINER = "node"
"""The container and replicated-job name: the Trainer's (its torch runtime's template has a replicated job `node`
with a container `node`, and the Trainer names the rendezvous host after it); the JobSet uses the same."""
RESULTS_MOUNT = "/results"
SUITE_MOUNT = "/etc/commbench/suite"
SHM_MOUNT = "/dev/shm"
RESULTS_VOLUME, SUITE_VOLUME, SHM_VOLUME = "results", "suite", "dshm"
MASTER_PORT = 29500
"""The rendezvous port on node rank 0: the Trainer's ContainerTrainerPort (its PET_MASTER_PORT), also torchrun's
default; the JobSet manifest passes it itself."""
SUITE_FILE_DEFAULT = "suite.toml"
CONFIGMAP_MAX_BYTES = 1024 * 1024
"""The API server refuses a ConfigMap whose data passes 1 MiB."""


@dataclass(frozen=True)
class SuiteSource:
    """How the pod finds the suite: a shipped suite by its name (inside the image's commbench package), or a local
    file shipped in a ConfigMap of the same YAML stream and mounted at SUITE_MOUNT."""

    argument: str
    """What `commbench run` gets in the pod: the shipped name, or the mounted file's path."""
    configmap_key: str | None = None
    text: str | None = None


def shipped(name: str) -> SuiteSource:
    return SuiteSource(argument=name)


def local_file(path: Path, text: str) -> SuiteSource:
    """The file's own name as the ConfigMap key (so meta.json's `suite` names it) where it is a valid key."""
    key = path.name if names.CONFIGMAP_KEY.fullmatch(path.name) and len(path.name) <= 253 else SUITE_FILE_DEFAULT
    size = len(text.encode("utf-8"))
    if size > CONFIGMAP_MAX_BYTES - len(key):
        raise CommbenchError(f"suite {path} is {size} bytes; a ConfigMap holds at most 1 MiB: split the suite into "
                             "smaller ones")
    return SuiteSource(argument=f"{SUITE_MOUNT}/{key}", configmap_key=key, text=text)


def suite_configmap_name(job_name: str) -> str:
    return f"{job_name}-suite"


def commbench_args(suite: SuiteSource, run_id: str) -> list[str]:
    """torchrun's script part: `-m commbench run SUITE --out /results --run-id RUN_ID`. Not --quiet: the tables go to
    the log of rank 0's pod, the one view of the results that needs no volume."""
    return ["-m", "commbench", "run", suite.argument, "--out", RESULTS_MOUNT, "--run-id", run_id]


def volumes(*, results_pvc: str | None, suite: SuiteSource, job_name: str) -> list[dict]:
    """The pod's volumes: the results (the claim, else an emptyDir that goes with the pod), /dev/shm in memory
    (NCCL's shared-memory transport between the pod's GPUs needs more than the container runtime's 64 MiB), and the
    suite's ConfigMap where there is one."""
    results: dict = ({"persistentVolumeClaim": {"claimName": results_pvc}} if results_pvc is not None
                     else {"emptyDir": {}})
    found = [{"name": RESULTS_VOLUME, **results}, {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}]
    if suite.configmap_key is not None:
        found.append({"name": SUITE_VOLUME, "configMap": {"name": suite_configmap_name(job_name)}})
    return found


def volume_mounts(suite: SuiteSource) -> list[dict]:
    mounts: list[dict] = [{"name": RESULTS_VOLUME, "mountPath": RESULTS_MOUNT},
                          {"name": SHM_VOLUME, "mountPath": SHM_MOUNT}]
    if suite.configmap_key is not None:
        mounts.append({"name": SUITE_VOLUME, "mountPath": SUITE_MOUNT, "readOnly": True})
    return mounts


def suite_configmap(suite: SuiteSource, *, job_name: str, metadata: dict) -> dict | None:
    """The ConfigMap that carries a local suite file, or None for a shipped suite."""
    if suite.configmap_key is None or suite.text is None:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": suite_configmap_name(job_name), **metadata},
            "data": {suite.configmap_key: suite.text}}

