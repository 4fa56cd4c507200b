"""srun's GPU binding as Slurm itself sets it (review finding D2): a real single-host Slurm 22.05 (tests/local_slurm.py)
whose node declares 4 GPUs as a generic resource (GresTypes=gpu, Gres=gpu:4, gres.conf File= four character devices
made here with mknod: Slurm takes only character or block devices there). Real srun steps of 4 tasks with
--gres=gpu:4 (no binding), --gpus-per-task=1 and --gpu-bind=single:1; each task decides its rank and GPU with
commbench's own functions (srun_ranks.adopt, resolve_target, Machine.gpu_index) from the environment slurmstepd gave
it, and every rank must get a GPU of its own, with no refusal. A step of 3 tasks on 2 GPUs, unbound or bound with
--gpu-bind=single:1, is refused in one line by every task, and `srun commbench sweep` on it exits 2 with that line
from every task and writes nothing.

Both ways Slurm numbers CUDA_VISIBLE_DEVICES run: TaskPlugin=task/none gives the node's (global) indices;
task/cgroup with ConstrainDevices=yes (a real GPU cluster) gives each task a device cgroup and indices local to it,
so a bound task sees CUDA_VISIBLE_DEVICES=0. The task's physical GPU is then told by the devices it may open: the
devices are major 1 with unused minors, so open() fails with ENXIO where the cgroup lets the task reach the device
and with EPERM where it does not.

The devices are not GPUs, so CUDA's device count, the one fact torch would add, is read from CUDA_VISIBLE_DEVICES as
CUDA reads it (gpu_mapping.visible_device_ids); no CUDA is needed for the decision."""

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env
from tests.local_slurm import LocalSlurm, unavailable_reason

GPUS = 4
CPUS = GPUS
"""The node claims a CPU per GPU (SlurmdParameters=config_overrides) whatever this host has: under CR_Core, 4 tasks on
one node need 4 CPUs."""
DEVICE_MAJOR, FIRST_MINOR = 1, 240
"""Char devices 1:240..243: the mem driver's major, minors it does not use (open gives ENXIO), so no real device of
this host is named in gres.conf or denied to a task by the device cgroup."""
CGROUP_DEVICES = Path("/sys/fs/cgroup/devices")
STEP_TIMEOUT_S = 120

MAPPING_TASK = r"""
import errno, json, os, sys
from commbench import gpu_mapping, srun_ranks
from commbench.errors import CommbenchError
from commbench.machine import Machine, resolve_target

srun_ranks.adopt(address_of=lambda node: "127.0.0.1")  # what the CLI does first: this task becomes its rank
visible = gpu_mapping.visible_device_ids(os.environ) or ()
facts = {"gpus": len(visible), "nccl_available": True, "nccl_version": [2, 27, 3], "gpu_capability": [9, 0]}
machine = Machine.here_from(facts)

def may_open(path):
    try:
        os.close(os.open(path, os.O_RDONLY))
    except OSError as error:
        return error.errno != errno.EPERM  # EPERM: the task's device cgroup denies it; ENXIO: no driver behind it
    return True

said = {"local_id": int(os.environ["SLURM_LOCALID"]), "rank": os.environ.get("RANK"),
        "visible": list(visible), "step_gpus": os.environ.get("SLURM_STEP_GPUS"),
        "gpus_on_node": os.environ.get("SLURM_GPUS_ON_NODE"),
        "reachable": [index for index, path in enumerate(sys.argv[1:]) if may_open(path)]}
try:
    resolve_target(machine)  # the launcher's check, over every rank of the node
    said["index"] = machine.gpu_index("nccl")  # this rank's own choice
except CommbenchError as error:
    said["refused"] = str(error)
print(json.dumps(said), flush=True)
"""

CLI_TASK = r"""
import os, sys
from commbench import gpu_mapping
from commbench.machine import Machine

# torch's facts, with the GPU count CUDA would give for this task's CUDA_VISIBLE_DEVICES (the devices are no GPUs)
gpus = len(gpu_mapping.visible_device_ids(os.environ) or ())
Machine.facts_here = staticmethod(lambda: {"gpus": gpus, "nccl_available": True, "nccl_version": [2, 27, 3],
                                            "gpu_capability": [9, 0], "gpu_memory_bytes": 80 * 2**30})
sys.argv = ["commbench", *sys.argv[1:]]
from commbench.cli import program
program()
"""


def make_gpu_devices(folder: Path) -> list[Path]:
    """GPUS character devices with distinct minors; the test is skipped, with why, where mknod is not allowed."""
    folder.mkdir()
    devices = [folder / f"gpu{index}" for index in range(GPUS)]
    for index, path in enumerate(devices):
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(DEVICE_MAJOR, FIRST_MINOR + index))
        except OSError as error:
            pytest.skip(f"mknod of a character device failed here ({error}): Slurm takes only character or block "
                        "devices as gres.conf File=, so the test node cannot declare GPUs")
    return devices


def cgroup_devices_reason() -> str | None:
    """None where Slurm's cgroup/v1 plugin can constrain devices here; else why not."""
    if not os.access(CGROUP_DEVICES / "devices.allow", os.W_OK):
        return f"no writable cgroup v1 devices controller at {CGROUP_DEVICES}: ConstrainDevices cannot run here"
    return None


class GpuNodeSlurm(LocalSlurm):
    """A LocalSlurm of one node that declares GPUS GPUs (the given devices) and claims CPUS CPUs; with
    constrain_devices, task/cgroup confines each task to its GPUs and Slurm numbers them locally."""

    def __init__(self, devices: list[Path], *, constrain_devices: bool, workdir: Path):
        super().__init__(nodes=1, workdir=workdir)
        # slurmd names its device cgroup after the node (slurm_NODE): a name of this process's own keeps another
        # test session's node out of it
        self.node_names = [f"gpu{os.getpid()}"]
        self.devices = devices
        self.constrain_devices = constrain_devices

    def _write_conf(self) -> None:
        super()._write_conf()
        # slurmd reads gres.conf and cgroup.conf beside the slurm.conf it was started with
        (self.workdir / "gres.conf").write_text("".join(f"Name=gpu File={path}\n" for path in self.devices))
        lines = [self._gpu_node(line) if line.startswith("NodeName=") else line
                 for line in self.conf_path.read_text().splitlines()]
        lines += ["GresTypes=gpu", "SlurmdParameters=config_overrides"]
        if self.constrain_devices:
            lines = [re.sub(r"^TaskPlugin=.*", "TaskPlugin=task/cgroup", line) for line in lines]
            (self.workdir / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n")
        self.conf_path.write_text("\n".join(lines) + "\n")

    @staticmethod
    def _gpu_node(line: str) -> str:
        line = re.sub(r" (CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=\S+", "", line)
        return (f"{line} CPUs={CPUS} Boards=1 SocketsPerBoard=1 CoresPerSocket={CPUS} ThreadsPerCore=1 "
                f"Gres=gpu:{GPUS}")


def _made_cgroups() -> set[Path]:
    """The device cgroups of this process's test node (GpuNodeSlurm's node name)."""
    return set(CGROUP_DEVICES.glob(f"slurm*gpu{os.getpid()}*")) if CGROUP_DEVICES.is_dir() else set()


def _remove_cgroups(paths: set[Path]) -> None:
    """The device cgroups slurmd made for the test node, deepest first (rmdir takes only empty, unused ones)."""
    for path in sorted((folder for top in paths for folder in top.rglob("*") if folder.is_dir()), reverse=True):
        path.rmdir()
    for path in paths:
        path.rmdir()


@pytest.fixture(scope="module", params=["global", "local"])
def gpu_node(request, tmp_path_factory):
    """The cluster, started once per numbering: "global" (task/none) and "local" (task/cgroup, ConstrainDevices)."""
    reason = unavailable_reason() or (cgroup_devices_reason() if request.param == "local" else None)
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp(f"slurm-gpus-{request.param}")
    devices = make_gpu_devices(workdir / "dev")
    cgroups_before = _made_cgroups()
    try:
        with GpuNodeSlurm(devices, constrain_devices=request.param == "local", workdir=workdir) as cluster:
            cluster.numbering = request.param
            yield cluster
    finally:
        _remove_cgroups(_made_cgroups() - cgroups_before)


def srun(cluster, options: list[str], program: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["srun", "--nodes=1", f"--partition={cluster.partition}", *options, *program],
                          env={**commbench_env(), "SLURM_CONF": cluster.env["SLURM_CONF"]}, cwd=cwd,
                          capture_output=True, text=True, timeout=STEP_TIMEOUT_S)


def mapped(cluster, options: list[str], tmp_path: Path) -> list[dict]:
    """What each task of `srun OPTIONS` said (MAPPING_TASK), by local id; every task must have spoken (srun may
    exit 0 where a task never started)."""
    done = srun(cluster, options, [sys.executable, "-c", MAPPING_TASK, *map(str, cluster.devices)], tmp_path)
    said = sorted((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")),
                  key=lambda task: task["local_id"])
    tasks = int(re.search(r"--ntasks=(\d+)", " ".join(options)).group(1))
    assert done.returncode == 0 and len(said) == tasks, f"{done}\n{cluster.logs()}"
    return said


def physical_gpu(task: dict, numbering: str) -> int:
    """The node's GPU behind the task's chosen device: CUDA_VISIBLE_DEVICES names it by the node's index (global), or
    by its place among the devices the task's cgroup lets it reach (local)."""
    named = int(task["visible"][task["index"]])
    return named if numbering == "global" else task["reachable"][named]


def test_slurm_lists_the_gpus_of_the_node(gpu_node, tmp_path):
    shown = subprocess.run(["scontrol", "show", "node", gpu_node.node_names[0]], env=gpu_node.env,
                           capture_output=True, text=True, timeout=30)
    assert f"Gres=gpu:{GPUS}" in shown.stdout, shown.stdout + shown.stderr
    (task,) = mapped(gpu_node, ["--ntasks=1", f"--gres=gpu:{GPUS}"], tmp_path)
    assert len(task["visible"]) == GPUS and task["gpus_on_node"] == str(GPUS)  # a dropped File= would set neither


@pytest.mark.parametrize("binding, visible_each", [
    ([f"--gres=gpu:{GPUS}"], GPUS),  # no binding: every task sees the step's GPUs
    (["--gpus-per-task=1"], 1),  # Slurm binds per task (--gpu-bind=per_task:1)
    ([f"--gres=gpu:{GPUS}", "--gpu-bind=single:1"], 1),
], ids=lambda value: " ".join(value) if isinstance(value, list) else str(value))
def test_every_rank_of_the_step_gets_a_gpu_of_its_own(gpu_node, binding, visible_each, tmp_path):
    tasks = mapped(gpu_node, [f"--ntasks={GPUS}", *binding], tmp_path)
    assert not [task["refused"] for task in tasks if "refused" in task]
    assert [task["rank"] for task in tasks] == [str(rank) for rank in range(GPUS)]  # srun_ranks took the step
    # what Slurm set: a bound task sees its own GPU while SLURM_GPUS_ON_NODE counts the step's
    assert all(len(task["visible"]) == visible_each and task["gpus_on_node"] == str(GPUS) for task in tasks)
    assert sorted(physical_gpu(task, gpu_node.numbering) for task in tasks) == list(range(GPUS))


REFUSED_GPUS, REFUSED_TASKS = 2, 3
"""The refused step: 3 tasks on 2 of the node's GPUs, so two ranks would share one (few tasks: each runs the CLI)."""


@pytest.mark.parametrize("binding, fragment", [
    ([f"--gres=gpu:{REFUSED_GPUS}"],
     f"{REFUSED_TASKS} ranks on this machine exceed its {REFUSED_GPUS} visible GPU(s)"),
    ([f"--gres=gpu:{REFUSED_GPUS}", "--gpu-bind=single:1"],
     f"{REFUSED_TASKS} srun tasks on this node and the Slurm step holds {REFUSED_GPUS} GPU(s) there"),
], ids=["unbound", "single:1"])
def test_more_tasks_than_the_steps_gpus_are_refused_in_one_line(gpu_node, binding, fragment, tmp_path):
    tasks = mapped(gpu_node, [f"--ntasks={REFUSED_TASKS}", *binding], tmp_path)
    for task in tasks:
        assert fragment in task.get("refused", "") and "\n" not in task["refused"], task


def test_the_cli_of_every_task_refuses_with_exit_2_and_writes_nothing(gpu_node, tmp_path):
    """`srun commbench sweep`: each task runs the CLI itself, so each says the refusal on its own stderr."""
    out = tmp_path / "results"
    done = srun(gpu_node, [f"--ntasks={REFUSED_TASKS}", f"--gres=gpu:{REFUSED_GPUS}",
                           f"--error={tmp_path}/task-%t.err"],
                [sys.executable, "-c", CLI_TASK, "sweep", "-c", "all_reduce", "--sizes", "4K", "--out", str(out)],
                tmp_path)
    assert done.returncode == 2, f"{done}\n{gpu_node.logs()}"
    said = [path.read_text().splitlines() for path in sorted(tmp_path.glob("task-*.err"))]
    assert len(said) == REFUSED_TASKS, done
    for lines in said:
        assert len(lines) == 1 and lines[0].startswith("commbench: error:"), lines
        assert f"{REFUSED_TASKS} ranks on this machine exceed its {REFUSED_GPUS} visible GPU(s)" in lines[0]
    assert not out.exists()
