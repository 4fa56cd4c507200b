"""`commbench k8s`: every manifest it can write (TrainJob or JobSet, with and without a Kueue queue, a results claim
and a local suite file) validates against the CustomResourceDefinitions the projects ship (../shared/data/k8s: the
served version's openAPIV3Schema, x-kubernetes-* keys dropped, checked with jsonschema), has no field the schema
does not declare (what `kubectl apply`'s strict field validation refuses), keeps the CRDs' CEL name rules, and names
the torch runtime the Trainer ships. Then the pods' commands themselves run here, two "pods" per kind as real
torchrun processes on gloo, with the environment the Trainer or the Job controller gives them: rank 0's pod fills
one run folder, the other pod writes nothing. Bad input is refused in one line, exit 2, with nothing written."""

import copy
import functools
import itertools
import json
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest
import yaml

from commbench.errors import CommbenchError
from commbench.k8s import manifest, names, pod, quantity, resources
from tests.conftest import commbench_env
from tests.refusals import assert_refused, invoke

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
K8S_DATA = SHARED / "data" / "k8s"
needs_crds = pytest.mark.skipif(not K8S_DATA.is_dir(),
                                reason=f"{K8S_DATA} is absent: the TrainJob and JobSet CRDs live in ../shared")
CRD_FILES = {"TrainJob": "trainer.kubeflow.org_trainjobs.yaml", "JobSet": "jobset.x-k8s.io_jobsets.yaml"}
RUNTIME_FILE = "runtime-torch-distributed.yaml"
IMAGE = "ghcr.io/example/commbench:1.0"
TINY_SUITE = """# one small all_reduce: what the pods of these tests run
description = "k8s test: one all_reduce size"

[[bench]]
name = "tiny"
kind = "sweep"
collective = "all_reduce"
sizes = "4K"
iters = 3
warmup = 1
"""
POD_RUN_TIMEOUT_S = 180


def write_manifest(args: list[str], tmp_path: Path) -> tuple[list[dict], str]:
    """`commbench k8s ARGS` in this process: the YAML stream's documents, and its text."""
    result = invoke(["k8s", *args], cwd=tmp_path)
    assert result.exit_code == 0, result.stderr + str(result.exception)
    return list(yaml.safe_load_all(result.stdout)), result.stdout


def tiny_suite_file(folder: Path) -> Path:
    path = folder / "tiny-k8s.toml"
    path.write_text(TINY_SUITE, encoding="utf-8")
    return path


# ---- the CRDs ---------------------------------------------------------------------------------------------------


@functools.cache
def crd(kind: str) -> dict:
    return yaml.safe_load((K8S_DATA / CRD_FILES[kind]).read_text(encoding="utf-8"))


def served_schema(api_version: str, kind: str) -> dict:
    """The openAPIV3Schema of the CRD version the manifest's apiVersion names, which must be served."""
    definition = crd(kind)
    group, version = api_version.split("/")
    assert definition["spec"]["group"] == group and definition["spec"]["names"]["kind"] == kind
    (served,) = [entry for entry in definition["spec"]["versions"] if entry["name"] == version and entry["served"]]
    return served["schema"]["openAPIV3Schema"]


def without_kubernetes_extensions(node):
    """The schema with every x-kubernetes-* key dropped (CEL rules, list types, int-or-string markers), which are
    not JSON Schema keywords."""
    if isinstance(node, dict):
        return {key: without_kubernetes_extensions(value) for key, value in node.items()
                if not key.startswith("x-kubernetes-")}
    if isinstance(node, list):
        return [without_kubernetes_extensions(value) for value in node]
    return node


def schema_errors(document: dict) -> list[str]:
    schema = without_kubernetes_extensions(served_schema(document["apiVersion"], document["kind"]))
    jsonschema.Draft4Validator.check_schema(schema)  # OpenAPI 3.0's schema object is JSON Schema draft 4-5
    validator = jsonschema.Draft4Validator(schema)
    return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document)]


def undeclared_fields(instance, schema: dict, path: str = "") -> list[str]:
    """Fields the schema does not declare, where it declares its properties and keeps no unknown ones: what the API
    server prunes and `kubectl apply` (strict field validation) refuses. A misspelt key fails here, not in jsonschema,
    which lets undeclared properties through."""
    found: list[str] = []
    if isinstance(instance, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        open_ = schema.get("x-kubernetes-preserve-unknown-fields") or properties is None
        for key, value in instance.items():
            if properties is not None and key in properties:
                found += undeclared_fields(value, properties[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                found += undeclared_fields(value, extra, f"{path}.{key}")
            elif not open_ and extra is not True:
                found.append(f"{path}.{key}")
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for number, value in enumerate(instance):
            found += undeclared_fields(value, schema["items"], f"{path}[{number}]")
    return found


def cel_name_pattern(kind: str) -> re.Pattern | None:
    """The regular expression a CRD's top-level CEL rule holds metadata.name to, if it has one (the TrainJob's)."""
    for rule in served_schema(*API_OF[kind]).get("x-kubernetes-validations", []):
        match = re.fullmatch(r"self\.metadata\.name\.matches\('(.+)'\)", rule["rule"])
        if match:
            return re.compile(match.group(1))
    return None


API_OF = {"TrainJob": (manifest.TRAINJOB_API, "TrainJob"), "JobSet": (manifest.JOBSET_API, "JobSet")}


def torch_runtime() -> dict:
    """The torch-distributed ClusterTrainingRuntime as the Trainer's Helm chart installs it (its {{ }} lines are
    Helm template directives that only add labels: dropped, the rest is plain YAML)."""
    lines = (K8S_DATA / RUNTIME_FILE).read_text(encoding="utf-8").splitlines()
    return yaml.safe_load("\n".join(line for line in lines if not line.strip().startswith("{{")))


# ---- every manifest against its schema --------------------------------------------------------------------------

CASES = list(itertools.product(manifest.KINDS, (None, "team-a"), (None, "bench-results"), ("shipped", "local")))


def case_args(kind: str, queue: str | None, claim: str | None, suite: str, tmp_path: Path) -> list[str]:
    args = [str(tiny_suite_file(tmp_path)) if suite == "local" else "nccl-tests", "--kind", kind,
            "--nodes", "4", "--gpus-per-node", "8", "--image", IMAGE, "--name", "bench-a", "--namespace", "ml"]
    args += ["--queue", queue] if queue else []
    args += ["--results-pvc", claim] if claim else []
    return args


def job_of(documents: list[dict]) -> dict:
    (job,) = [document for document in documents if document["kind"] in CRD_FILES]
    return job


def pod_spec(job: dict) -> dict:
    """The pod spec the manifest gives: the JobSet's own, or the TrainJob's runtime patch for the `node` job."""
    if job["kind"] == "JobSet":
        return job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (patch,) = job["spec"]["runtimePatches"]
    (replicated,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return replicated["template"]["spec"]["template"]["spec"]


def container_command(job: dict) -> list[str]:
    if job["kind"] == "JobSet":
        return pod_spec(job)["containers"][0]["command"]
    return job["spec"]["trainer"]["command"]


@pytest.mark.no_process
@needs_crds
@pytest.mark.parametrize("kind, queue, claim, suite", CASES, ids=["-".join(map(str, case)) for case in CASES])
def test_every_manifest_validates_against_its_crd(kind, queue, claim, suite, tmp_path):
    documents, text = write_manifest(case_args(kind, queue, claim, suite, tmp_path), tmp_path)
    assert text.startswith("# commbench k8s") and "kubectl -n ml apply -f" in text
    assert [document["kind"] for document in documents] == (["ConfigMap"] if suite == "local" else []) + \
        [{"trainjob": "TrainJob", "jobset": "JobSet"}[kind]]
    for document in documents:
        if document["kind"] == "ConfigMap":
            check_configmap(document)
            continue
        assert schema_errors(document) == []
        assert undeclared_fields(document, served_schema(document["apiVersion"], document["kind"])) == []
        metadata = document["metadata"]
        assert set(metadata) <= {"name", "namespace", "labels"} and metadata["namespace"] == "ml"
        assert metadata.get("labels", {}) == ({manifest.QUEUE_LABEL: queue} if queue else {})
        pattern = cel_name_pattern(document["kind"])
        assert pattern is None or pattern.fullmatch(metadata["name"])
    job = job_of(documents)
    spec = pod_spec(job)
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for container in spec["containers"]
              for mount in container["volumeMounts"]}
    assert set(mounts.values()) == set(volumes)  # every mount names a volume of the pod, every volume is mounted
    results = volumes[mounts[pod.RESULTS_MOUNT]]
    assert results == ({"name": "results", "persistentVolumeClaim": {"claimName": claim}} if claim
                       else {"name": "results", "emptyDir": {}})
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
    command = container_command(job)
    run = command.index("run")
    assert command[run - 2:run] == ["-m", "commbench"]
    assert command[run + 2:] == ["--out", pod.RESULTS_MOUNT, "--run-id", "bench-a"]
    if suite == "local":
        (configmap,) = [document for document in documents if document["kind"] == "ConfigMap"]
        (key,) = configmap["data"]
        assert volumes[mounts[pod.SUITE_MOUNT]]["configMap"]["name"] == configmap["metadata"]["name"]
        assert command[run + 1] == f"{pod.SUITE_MOUNT}/{key}"  # the pod runs the mounted copy of the file
        assert configmap["data"][key] == TINY_SUITE and configmap["metadata"]["namespace"] == "ml"
    else:
        assert command[run + 1] == "nccl-tests" and pod.SUITE_MOUNT not in mounts


def check_configmap(document: dict) -> None:
    """A core ConfigMap has no CRD here: its shape, as the API server checks it."""
    assert document["apiVersion"] == "v1" and set(document) == {"apiVersion", "kind", "metadata", "data"}
    name = document["metadata"]["name"]
    assert len(name) <= names.SUBDOMAIN_MAX and names.DNS1123_SUBDOMAIN.fullmatch(name)
    data = document["data"]
    assert data and all(isinstance(key, str) and names.CONFIGMAP_KEY.fullmatch(key) and isinstance(value, str)
                        for key, value in data.items())
    assert sum(len(key) + len(value.encode()) for key, value in data.items()) <= pod.CONFIGMAP_MAX_BYTES


@pytest.mark.no_process
@needs_crds
def test_the_schema_checks_catch_what_the_api_server_refuses(tmp_path):
    """The checks above can fail: a misspelt field, a wrong type, a missing runtimeRef and a name the CEL rule
    refuses are each found."""
    documents, _ = write_manifest(case_args("trainjob", "q", "claim", "shipped", tmp_path), tmp_path)
    job = job_of(documents)
    misspelt = copy.deepcopy(job)
    mounts = pod_spec(misspelt)["containers"][0]
    mounts["volumeMount"] = mounts.pop("volumeMounts")
    assert undeclared_fields(misspelt, served_schema(manifest.TRAINJOB_API, "TrainJob")) == [
        ".spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
        ".containers[0].volumeMount"]
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["trainer"]["numNodes"] = "4"
    assert any("numNodes" in error for error in schema_errors(wrong_type))
    no_runtime = copy.deepcopy(job)
    del no_runtime["spec"]["runtimeRef"]
    assert any("runtimeRef" in error for error in schema_errors(no_runtime))
    assert not cel_name_pattern("TrainJob").fullmatch("1-bench")
    jobset_documents, _ = write_manifest(case_args("jobset", None, None, "shipped", tmp_path), tmp_path)
    jobset = job_of(jobset_documents)
    jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] = 3
    assert schema_errors(jobset)


@pytest.mark.no_process
@needs_crds
def test_the_trainjob_names_the_torch_runtime_and_runs_the_suite_under_its_torchrun(tmp_path):
    """runtimeRef names the ClusterTrainingRuntime the Trainer ships; its torch policy sets the PET_* variables, so the
    command is torchrun with no topology options of its own; the patch targets the runtime's `node` job and
    container."""
    runtime = torch_runtime()
    documents, _ = write_manifest(["nccl-tests", "--nodes", "2", "--gpus-per-node", "8", "--image", IMAGE,
                                   "--name", "bench-b"], tmp_path)
    (job,) = documents
    reference = job["spec"]["runtimeRef"]
    assert reference == {"apiGroup": runtime["apiVersion"].split("/")[0], "kind": runtime["kind"],
                         "name": runtime["metadata"]["name"]}
    assert "torch" in runtime["spec"]["mlPolicy"]
    trainer = job["spec"]["trainer"]
    assert trainer["command"][:4] == ["torchrun", "-m", "commbench", "run"] and trainer["command"][4] == "nccl-tests"
    assert not any(arg.startswith(("--nnodes", "--nproc", "--node-rank", "--master", "--rdzv"))
                   for arg in trainer["command"])
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["resourcesPerNode"] == {"requests": {"cpu": "64", "memory": "512Gi"},
                                           "limits": {"nvidia.com/gpu": 8}}  # 8 x the per-GPU defaults
    runtime_jobs = {entry["name"]: entry for entry in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    (patched,) = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    runtime_containers = runtime_jobs[patched["name"]]["template"]["spec"]["template"]["spec"]["containers"]
    assert {container["name"] for container in pod_spec(job)["containers"]} <= \
        {container["name"] for container in runtime_containers}


@pytest.mark.no_process
def test_the_jobset_command_is_torchrun_with_the_topology_and_pod_0_as_master(tmp_path):
    documents, _ = write_manifest(["nccl-tests", "--kind", "jobset", "--nodes", "3", "--gpus-per-node", "4",
                                   "--image", IMAGE, "--name", "bench-c"], tmp_path)
    (job,) = documents
    replicated = job["spec"]["replicatedJobs"][0]
    job_spec = replicated["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"], job_spec["completionMode"]) == (3, 3, "Indexed")
    assert job["spec"]["network"]["subdomain"] == "bench-c" and job["spec"]["failurePolicy"] == {"maxRestarts": 0}
    container = pod_spec(job)["containers"][0]
    assert container["command"][:6] == ["torchrun", "--nnodes=3", "--nproc-per-node=4",
                                        "--node-rank=$(JOB_COMPLETION_INDEX)",
                                        f"--master-addr=bench-c-{replicated['name']}-0-0.bench-c",
                                        f"--master-port={pod.MASTER_PORT}"]
    assert container["env"] == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    assert container["resources"] == {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 4}}
    assert "securityContext" not in container  # no RDMA device asked for: no IPC_LOCK
    assert "hostNetwork" not in pod_spec(job) and "dnsPolicy" not in pod_spec(job)  # the pod network by default


# ---- what each pod asks of its node ------------------------------------------------------------------------------

DEFAULT_RESOURCES = {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 4}}
POD_ASKS = [
    # kind, extra options, the container's resources, IPC_LOCK, host network
    # IPC_LOCK by default only with an RDMA device; --ipc-lock and --no-ipc-lock overrule that either way
    ("trainjob", [], DEFAULT_RESOURCES, False, False),
    ("trainjob", ["--ipc-lock"], DEFAULT_RESOURCES, True, False),
    ("jobset", ["--ipc-lock"], DEFAULT_RESOURCES, True, False),
    ("trainjob", ["--cpus-per-gpu", "2.5", "--memory-per-gpu", "100G", "--rdma-resource", "rdma/ib"],
     {"requests": {"cpu": "10", "memory": "400G"}, "limits": {"nvidia.com/gpu": 4, "rdma/ib": 1}}, True,
     False),
    ("trainjob", ["--no-ipc-lock", "--rdma-resource", "nvidia.com/hostdev", "--rdma-count", "4"],
     {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 4, "nvidia.com/hostdev": 4}}, False,
     False),
    ("jobset", ["--host-network", "--rdma-resource", "rdma/ib", "--rdma-count", "2", "--memory-per-gpu", "1.5Ti"],
     {"requests": {"cpu": "32", "memory": "6Ti"}, "limits": {"nvidia.com/gpu": 4, "rdma/ib": 2}}, True, True),
    ("jobset", ["--cpus-per-gpu", "2250m"],
     {"requests": {"cpu": "9", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": 4}}, False, False),
]


def container_resources(job: dict) -> dict:
    if job["kind"] == "JobSet":
        return pod_spec(job)["containers"][0]["resources"]
    return job["spec"]["trainer"]["resourcesPerNode"]


@pytest.mark.no_process
@needs_crds
@pytest.mark.parametrize("kind, extra, expected, ipc_lock, host_network", POD_ASKS,
                         ids=[f"{case[0]} {' '.join(case[1])}" for case in POD_ASKS])
def test_what_each_pod_asks_lands_where_kubernetes_reads_it_and_validates(kind, extra, expected, ipc_lock,
                                                                          host_network, tmp_path):
    """CPU and memory requested (the pod's GPUs times the per-GPU figures), GPUs and the RDMA device as limits, IPC_LOCK
    in the container's securityContext (the TrainJob's through its runtime patch), hostNetwork with the DNS policy
    that keeps cluster names: every variant still validates against the CRD, with no undeclared field."""
    documents, text = write_manifest(["nccl-tests", "--kind", kind, "--nodes", "2", "--gpus-per-node", "4",
                                      "--image", IMAGE, "--name", "bench-r", *extra], tmp_path)
    (job,) = documents
    assert schema_errors(job) == []
    assert undeclared_fields(job, served_schema(job["apiVersion"], job["kind"])) == []
    assert container_resources(job) == expected
    (container,) = pod_spec(job)["containers"]
    assert container.get("securityContext", {}) == ({"capabilities": {"add": ["IPC_LOCK"]}} if ipc_lock else {})
    network = {key: pod_spec(job)[key] for key in ("hostNetwork", "dnsPolicy") if key in pod_spec(job)}
    assert network == ({"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"} if host_network else {})
    assert "# each pod asks: 4 GPU(s), " in text and ("IPC_LOCK" in text.split("---")[0]) == ipc_lock
    assert (baseline_violations(pod_spec(job)) == []) == (not ipc_lock and not host_network)


BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
"""The capabilities Pod Security's baseline level lets a container add (kubernetes.io/docs/concepts/security/
pod-security-standards)."""


def baseline_violations(spec: dict) -> list[str]:
    """What in a pod spec the baseline level refuses, of the fields commbench writes: host namespaces, privilege,
    added capabilities beyond BASELINE_CAPABILITIES."""
    found = [key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    for container in spec["containers"]:
        context = container.get("securityContext", {})
        if context.get("privileged"):
            found.append("privileged")
        found += [f"capability {name}" for name in context.get("capabilities", {}).get("add", [])
                  if name not in BASELINE_CAPABILITIES]
    return found


NODES = {  # 8-GPU nodes as sold: hardware threads, memory
    "DGX H100": (224, 2 * 2**40), "AWS p5.48xlarge": (192, 2 * 2**40), "AWS p4d.24xlarge": (96, 1152 * 2**30),
    "Azure ND96isr H100 v5": (96, 1900 * 2**30)}


def default_ask(gpus: int) -> resources.PodAsk:
    return resources.pod_ask(gpus=gpus, cpus_per_gpu=resources.DEFAULT_CPUS_PER_GPU,
                             memory_per_gpu=resources.DEFAULT_MEMORY_PER_GPU, rdma_resource=None, rdma_count=None,
                             ipc_lock=None, host_network=False)


@pytest.mark.no_process
@pytest.mark.parametrize("node", sorted(NODES))
def test_the_defaults_fit_an_8_gpu_node_with_room_for_its_reservations(node):
    """An 8-GPU pod at the defaults leaves at least a quarter of the node's threads and memory to the kubelet, the
    system and the DaemonSets."""
    threads, memory = NODES[node]
    ask = default_ask(8)
    assert ask.cpu_millis <= 0.75 * threads * quantity.MILLI and ask.memory_bytes <= 0.75 * memory


@pytest.mark.no_process
@pytest.mark.parametrize("gpus", [1, 2, 4, 8, 16, 72])
def test_the_cpu_default_gives_every_rank_two_cpus_and_torchrun_one(gpus):
    """What commbench in a pod warns below (2 usable CPUs per local rank), with torchrun's own on top."""
    assert default_ask(gpus).cpu_millis >= (resources.MIN_CPUS_PER_RANK * gpus + resources.TORCHRUN_CPUS) * 1000
    assert resources.MIN_CPUS_PER_RANK >= 2


@pytest.mark.no_process
@pytest.mark.parametrize("gpus", [1, 3, 8])
def test_the_fewest_cpus_per_gpu_accepted_is_the_one_the_refusal_names(gpus):
    def ask(millis: int) -> resources.PodAsk:
        return resources.pod_ask(gpus=gpus, cpus_per_gpu=f"{millis}m", memory_per_gpu="1Gi", rdma_resource=None,
                                 rdma_count=None, ipc_lock=None, host_network=False)

    least = -(-(2 * gpus + 1) * 1000 // gpus)
    assert ask(least).cpu_millis >= (2 * gpus + 1) * 1000
    with pytest.raises(CommbenchError) as refused:
        ask(least - 1)
    assert f"give --cpus-per-gpu {quantity.cores_text(least)} or more" in str(refused.value)


@pytest.mark.no_process
@pytest.mark.parametrize("text, millis, written", [("8", 8000, "8"), ("2.5", 2500, "2500m"), ("500m", 500, "500m"),
                                                     ("1e2", 100_000, "100"), ("0.0001", 1, "1m"), ("+3", 3000, "3")])
def test_cpu_quantities_read_and_write_as_kubernetes_does(text, millis, written):
    assert quantity.cpu_millis("--cpus-per-gpu", text, example="8") == millis
    assert quantity.cpu_text(millis) == written


@pytest.mark.no_process
@pytest.mark.parametrize("text, count, written", [("64Gi", 64 * 2**30, "64Gi"), ("100G", 10**11, "100G"),
                                                   ("1000001", 1000001, "1000001"), ("1.5Ti", 3 * 2**39, "1536Gi"),
                                                   ("1k", 1000, "1k"), ("2048Mi", 2**31, "2Gi")])
def test_memory_quantities_read_and_write_as_kubernetes_does(text, count, written):
    assert quantity.memory_bytes("--memory-per-gpu", text, example="64Gi") == count
    assert quantity.memory_text(count) == written
    assert quantity.memory_bytes("--memory-per-gpu", written, example="64Gi") == count  # what is written reads back


@pytest.mark.no_process
def test_a_local_suite_travels_in_the_configmap_byte_for_byte(tmp_path):
    """Comments, a tab, trailing spaces, non-ASCII text and no final newline: the ConfigMap's YAML gives the file
    back exactly."""
    text = '# Knoten: ünïcode\tand a tab   \ndescription = "tricky  "\n\n[[bench]]\nkind = "sweep"   \n' \
           'collective = "all_reduce"\nsizes = "1K"'
    suite = tmp_path / "tricky.toml"
    suite.write_text(text, encoding="utf-8")
    documents, _ = write_manifest([str(suite), "--nodes", "1", "--gpus-per-node", "1", "--image", IMAGE,
                                   "--name", "bench-d"], tmp_path)
    assert documents[0]["data"] == {"tricky.toml": text}


@pytest.mark.no_process
def test_out_writes_what_stdout_shows_and_no_claim_is_said_on_stderr(tmp_path):
    args = ["nccl-tests", "--nodes", "2", "--gpus-per-node", "8", "--image", IMAGE, "--name", "bench-e"]
    printed = invoke(["k8s", *args], cwd=tmp_path)
    written = invoke(["k8s", *args, "--out", str(tmp_path / "bench.yaml")], cwd=tmp_path)
    assert written.exit_code == 0 and (tmp_path / "bench.yaml").read_text(encoding="utf-8") == printed.stdout
    assert f"kubectl apply -f {tmp_path / 'bench.yaml'}" in written.stdout
    assert "emptyDir" in printed.stderr and "--results-pvc" in printed.stderr
    with_claim = invoke(["k8s", *args, "--results-pvc", "bench-results"], cwd=tmp_path)
    assert with_claim.exit_code == 0 and with_claim.stderr == ""


@pytest.mark.no_process
def test_the_default_name_is_new_per_manifest_and_fits_the_pod_names():
    now = datetime(2026, 12, 5, 1, 2, 3, tzinfo=timezone.utc)
    assert manifest.default_name("nccl-tests", 2, now) == "commbench-nccl-tests-20261205-010203"
    assert manifest.default_name("/some/where/My_Suite.toml", 2, now) == "commbench-my-suite-20261205-010203"
    for nodes in (1, 10, 1000, 10**6):
        name = manifest.default_name("a-very-long-suite-file-name-" * 4 + ".toml", nodes, now)
        names.check_job_name("--name", name, nodes=nodes)  # no refusal
        assert len(f"{name}-node-0-{nodes - 1}-abcde") <= 63
    assert manifest.default_name("___", 1, now) == "commbench-20261205-010203"


@pytest.mark.no_process
def test_the_cli_default_name_carries_the_suite_and_the_time(tmp_path):
    documents, _ = write_manifest(["nccl-tests", "--nodes", "1", "--gpus-per-node", "8", "--image", IMAGE], tmp_path)
    assert re.fullmatch(r"commbench-nccl-tests-\d{8}-\d{6}", documents[0]["metadata"]["name"])


# ---- the pods' commands, run here ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def expand_like_kubelet(argument: str, env: dict[str, str]) -> str:
    """$(VAR) replaced by the container's variable, as the kubelet does for command and args; $$ is a literal $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda match: "$" if match.group(0) == "$$" else env.get(match.group(1), match.group(0)), argument)


def start_pod(command: list[str], env: dict[str, str], mounts: dict[str, Path], folder: Path) -> subprocess.Popen:
    """One pod of the job on this machine: the container's command with its variables expanded, its mount paths
    mapped to folders here, torchrun as this Python's torch.distributed.run (the same program)."""
    argv = [expand_like_kubelet(argument, env) for argument in command]
    for mount_path, local in mounts.items():
        argv = [str(local) + argument[len(mount_path):] if argument.startswith(mount_path) else argument
                for argument in argv]
    assert argv[0] == "torchrun"
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *argv[1:]], cwd=folder,
                            env=commbench_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pod_mounts(documents: list[dict], folder: Path) -> dict[str, Path]:
    """The pod's volumes as folders: /results empty (an emptyDir, or a claim of one pod's own), the suite's
    ConfigMap as its files."""
    mounts = {pod.RESULTS_MOUNT: folder / "results"}
    mounts[pod.RESULTS_MOUNT].mkdir(parents=True)
    for document in documents:
        if document["kind"] == "ConfigMap":
            suite = folder / "suite"
            suite.mkdir()
            for key, value in document["data"].items():
                (suite / key).write_text(value, encoding="utf-8")
            mounts[pod.SUITE_MOUNT] = suite
    return mounts


def run_pods(documents: list[dict], environments: list[dict[str, str]], tmp_path: Path,
             rewrites: dict[str, str] | None = None) -> list[Path]:
    """Every pod at once (they meet in the rendezvous); returns each pod's /results folder. rewrites: command
    arguments replaced first (pod 0's hostname, which only the cluster's DNS resolves, and its port, made local)."""
    command = [(rewrites or {}).get(argument, argument) for argument in container_command(job_of(documents))]
    started, results = [], []
    for index, env in enumerate(environments):
        mounts = pod_mounts(documents, tmp_path / f"pod{index}")
        results.append(mounts[pod.RESULTS_MOUNT])
        started.append(start_pod(command, env, mounts, tmp_path / f"pod{index}"))
    for process in started:
        _, stderr = process.communicate(timeout=POD_RUN_TIMEOUT_S)
        assert process.returncode == 0, stderr[-3000:]
    return results


def assert_one_run_folder_by_rank_0(results: list[Path], run_id: str) -> None:
    run_dir = results[0] / run_id
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["kind"] == "suite"
    bench = json.loads((run_dir / "tiny" / "meta.json").read_text())
    assert bench["status"] == "complete" and bench["world_size"] == len(results)
    assert (run_dir / "tiny" / "results.csv").is_file()
    assert all(not any(folder.iterdir()) for folder in results[1:])  # the other pods write nothing


@pytest.mark.distributed
def test_the_trainjob_pods_run_the_suite_with_the_variables_the_trainer_sets(tmp_path):
    """Two pods of one GPU each, as the Trainer's torch plugin sets them up (PET_NNODES, PET_NPROC_PER_NODE,
    PET_NODE_RANK from the completion index, PET_MASTER_ADDR/PORT; here the address is this machine's)."""
    documents, _ = write_manifest([str(tiny_suite_file(tmp_path)), "--nodes", "2", "--gpus-per-node", "1",
                                   "--image", IMAGE, "--name", "bench-t"], tmp_path)
    trainer, port = job_of(documents)["spec"]["trainer"], str(free_port())
    environments = [{"PET_NNODES": str(trainer["numNodes"]), "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
                     "PET_NODE_RANK": str(index), "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port}
                    for index in range(trainer["numNodes"])]
    assert_one_run_folder_by_rank_0(run_pods(documents, environments, tmp_path), "bench-t")


@pytest.mark.distributed
def test_the_jobset_pods_run_the_suite_from_their_completion_index(tmp_path):
    """Two pods of one GPU each: the node rank comes from JOB_COMPLETION_INDEX through the kubelet's $(...)
    expansion; pod 0's hostname is this machine."""
    documents, _ = write_manifest([str(tiny_suite_file(tmp_path)), "--kind", "jobset", "--nodes", "2",
                                   "--gpus-per-node", "1", "--image", IMAGE, "--name", "bench-j"], tmp_path)
    master = f"--master-addr={manifest.master_host('bench-j')}"
    assert master == "--master-addr=bench-j-node-0-0.bench-j"
    port = f"--master-port={pod.MASTER_PORT}"
    assert [master, port] == container_command(job_of(documents))[4:6]
    environments = [{"JOB_COMPLETION_INDEX": str(index)} for index in range(2)]
    rewrites = {master: "--master-addr=127.0.0.1", port: f"--master-port={free_port()}"}
    assert_one_run_folder_by_rank_0(run_pods(documents, environments, tmp_path, rewrites), "bench-j")


# ---- refusals -----------------------------------------------------------------------------------------------------

GOOD = ["nccl-tests", "--nodes", "2", "--gpus-per-node", "8", "--image", IMAGE]
REFUSED = [
    (["--nodes", "0"], "--nodes 0"),
    (["--nodes", "-1"], "--nodes -1"),
    (["--gpus-per-node", "0"], "--gpus-per-node 0"),
    (["--nodes", str(2**31)], "int32"),
    (["--nodes", "abc"], "--nodes"),
    (["--image", ""], "--image is empty"),
    (["--image", "ghcr.io/x/commbench:1 --privileged"], "not a container image reference"),
    (["--name", "Bench_1"], "e.g. 'bench-1'"),
    (["--name", "1bench"], "RFC 1035"),
    (["--name", "b" * 49], "use at most 48"),
    (["--namespace", "ML"], "--namespace 'ML' is not a namespace name"),
    (["--namespace", "ml.team"], "DNS-1123 label"),
    (["--queue", "team a"], "--queue 'team a' is not a Kueue LocalQueue name"),
    (["--queue", "q" * 64], "at most 63"),
    (["--results-pvc", "my_claim"], "--results-pvc 'my_claim' is not a PersistentVolumeClaim name"),
    (["--runtime", "Torch"], "--runtime 'Torch' is not a ClusterTrainingRuntime name"),
    (["--runtime", "torch-distributed", "--kind", "jobset"], "drop --runtime"),
    (["--kind", "mpijob"], "--kind"),
    (["--cpus-per-gpu", "2"], "gives a pod of 8 rank(s) 16 CPUs"),
    (["--cpus-per-gpu", "2"], "give --cpus-per-gpu 2.125 or more"),
    (["--cpus-per-gpu", "-4"], "--cpus-per-gpu '-4' is negative"),
    (["--cpus-per-gpu", "eight"], "--cpus-per-gpu 'eight' is not a Kubernetes quantity"),
    (["--cpus-per-gpu", "1e999999999"], "out of any range"),
    (["--memory-per-gpu", "64 GiB"], "--memory-per-gpu '64 GiB' is not a Kubernetes quantity"),
    (["--memory-per-gpu", "0"], "asks for no memory"),
    (["--memory-per-gpu", "-1Gi"], "negative"),
    (["--memory-per-gpu", "512m"], "milli-bytes"),
    (["--memory-per-gpu", "10Ei"], "int64"),
    (["--rdma-count", "2"], "add --rdma-resource NAME"),
    (["--rdma-resource", "rdma/ib", "--rdma-count", "0"], "--rdma-count 0 is not a device count"),
    (["--rdma-resource", "rdma/ib", "--rdma-count", "-1"], "--rdma-count -1"),
    (["--rdma-resource", "rdma/ib", "--rdma-count", "many"], "--rdma-count"),
    (["--rdma-resource", "hostdev"], "DOMAIN/NAME"),
    (["--rdma-resource", "RDMA.io/ib"], "not a DNS-1123 subdomain"),
    (["--rdma-resource", "rdma/ib/0"], "not a qualified name"),
    (["--rdma-resource", "nvidia.com/gpu"], "which --gpus-per-node sets"),
    (["--rdma-resource", "kubernetes.io/ib"], "Kubernetes keeps for itself"),
    (["--rdma-resource", "requests.rdma/ib"], "Kubernetes keeps for itself"),
    (["--host-network"], "--host-network needs --kind jobset"),
]


@pytest.mark.no_process
@pytest.mark.parametrize("extra, fragment", REFUSED, ids=[" ".join(extra)[:40] for extra, _ in REFUSED])
def test_what_kubernetes_would_refuse_is_refused_in_one_line(extra, fragment, tmp_path):
    written = tmp_path / "written"
    written.mkdir()
    assert_refused(invoke(["k8s", *GOOD, *extra, "--out", str(written / "bench.yaml")], cwd=tmp_path),
                   fragment=fragment, left_empty=[written])


@pytest.mark.no_process
def test_a_suite_that_does_not_load_for_the_job_is_refused_before_anything_is_written(tmp_path):
    written = tmp_path / "written"
    written.mkdir()
    broken = tmp_path / "broken.toml"
    broken.write_text("[[bench]]\nkind = \"sweep\"\nsizes = \"1K:\"\n")
    cases = [("no-such-suite", "suite 'no-such-suite' not found"),
             (str(broken), "broken.toml"),
             ("cpu-ci", "--nproc 2 conflicts with WORLD_SIZE=16")]  # cpu-ci pins 2 ranks; the job has 2 x 8
    for suite, fragment in cases:
        assert_refused(invoke(["k8s", suite, *GOOD[1:], "--out", str(written / "bench.yaml")], cwd=tmp_path),
                       fragment=fragment, left_empty=[written])
    assert_refused(invoke(["k8s", *GOOD, "--out", str(tmp_path / "missing" / "bench.yaml")], cwd=tmp_path),
                   fragment="cannot write --out")
