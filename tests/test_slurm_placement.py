"""What `commbench slurm submit`'s script asks Slurm for and how each node's torchrun says where it is: the CPUs of a
GPU job (2 per rank + 1 by default, the user's choice winning) and torchrun's --local-addr, each node's own NodeAddr
looked up by the batch script and picked by each step; in a container image, pyxis' options on the step. The script
is run by bash here, with stand-ins for srun, scontrol and python that print what they were given (the real Slurm
runs of it are in tests/test_slurm.py)."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

from commbench.errors import CommbenchError
from commbench.slurm import script
from commbench.slurm.container import Container

HOSTILE = "we ird 'q' $(touch $CANARY.1) `touch $CANARY.2`; touch $CANARY.3"


def _request(**changes) -> script.JobRequest:
    fields = {"nodes": 2, "gpus_per_node": 8, "nproc_per_node": 8, "job_name": "placement"}
    return script.JobRequest(**{**fields, **changes})


def _sbatch_lines(request: script.JobRequest) -> list[str]:
    return [line for line in script.directives(request) if line.startswith("#SBATCH ")]


def _cpu_comment(request: script.JobRequest) -> str:
    return next(line for line in script.directives(request) if line.startswith("# CPUs: "))


@pytest.mark.no_process
@pytest.mark.parametrize("ranks", [1, 4, 8])
def test_a_gpu_job_asks_for_two_cpus_per_rank_and_one_for_torchrun(ranks):
    request = _request(nproc_per_node=ranks, gpus_per_node=ranks)
    wanted = 2 * ranks + 1
    assert f"#SBATCH --cpus-per-task={wanted}" in _sbatch_lines(request)
    assert "#SBATCH --exclusive" not in _sbatch_lines(request)
    assert "grants 1 CPU per task" in _cpu_comment(request)  # the script says why


@pytest.mark.no_process
@pytest.mark.parametrize("changes, present, absent", [
    ({"cpus_per_task": 3}, ["#SBATCH --cpus-per-task=3"], []),
    ({"exclusive": True}, ["#SBATCH --exclusive"], ["--cpus-per-task"]),
    ({"exclusive": True, "cpus_per_task": 40}, ["#SBATCH --exclusive", "#SBATCH --cpus-per-task=40"], []),
    ({"sbatch_args": ("--cpus-per-gpu=4",)}, ["#SBATCH --cpus-per-gpu=4"], ["--cpus-per-task"]),
    ({"sbatch_args": ("--mincpus=64",)}, ["#SBATCH --mincpus=64"], ["--cpus-per-task"]),
])
def test_the_users_cpu_choice_wins(changes, present, absent):
    request = _request(**changes)
    lines = _sbatch_lines(request)
    for line in present:
        assert line in lines
    for option in absent:
        assert not [line for line in lines if option in line]
    assert "as asked" in _cpu_comment(request)


@pytest.mark.no_process
def test_a_cpu_job_asks_for_what_slurm_gives_unless_told():
    request = _request(gpus_per_node=0, nproc_per_node=2)
    assert not [line for line in _sbatch_lines(request) if "cpus" in line or "exclusive" in line]
    assert "--cpus-per-task" in _cpu_comment(request)


@pytest.mark.no_process
def test_dry_run_shows_the_cpu_request_and_meta_keeps_it(commbench_cli, tmp_path):
    outcome = commbench_cli("slurm", "submit", "nccl-tests", "--nodes", "2", "--gpus-per-node", "8", "--dry-run",
                            "--out", str(tmp_path))
    assert outcome.returncode == 0, outcome.stderr
    assert "#SBATCH --cpus-per-task=17" in outcome.stdout and "# CPUs: --cpus-per-task=17" in outcome.stdout
    # sbatch reads #SBATCH lines up to the first command: the comment line keeps them all in its reach
    header = outcome.stdout.split("set -euo pipefail", 1)[0]
    assert all(line.startswith("#") or not line.strip() for line in header.splitlines())


def _stand_ins(folder: Path, *, node_addr: str | None) -> Path:
    """srun (runs its command here, as one node's task), scontrol (hostnames and NodeAddr; none for the step's own
    node when node_addr is None, so the script must fall back on the host name), python (writes its arguments, one
    per line, into $ARGS_FILE), hostname."""
    folder.mkdir()
    programs = {  # srun writes its own options, one per line, into $SRUN_OPTIONS_FILE
        "srun": 'while [ "${1#--}" != "$1" ]; do echo "$1" >> "$SRUN_OPTIONS_FILE"; shift; done\nexec "$@"',
        "python-stand-in": 'printf "%s\\n" "$@" > "$ARGS_FILE"',
        "hostname": "echo fallback-host",
    }
    if node_addr is not None:
        # scontrol show node NAME: a record over lines; -o show node LIST: one line per node of the list
        programs["scontrol"] = ('if [ "$2" = hostnames ]; then echo n1; echo n2; '
                                'elif [ "$1" = -o ]; then for node in n1 n2; do '
                                f'echo "NodeName=$node Arch=x86_64 NodeAddr={node_addr} NodeHostName=$node-host"; '
                                'done; '
                                f'else echo "NodeName=$3 Arch=x86_64 CoresPerSocket=8"; '
                                f'echo "   NodeAddr={node_addr} NodeHostName=$3-host Version=22.05"; fi')
    else:  # the head node (n1) is known; the step's own node (n2) is not: its task falls back on the host name
        programs["scontrol"] = ('if [ "$2" = hostnames ]; then echo n1; elif [ "$3" = n1 ]; then '
                                'echo "NodeAddr=10.0.0.1"; else echo "node $4 not found" >&2; exit 1; fi')
    for name, body in programs.items():
        path = folder / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return folder


def _run_script(tmp_path: Path, *, node_addr: str | None, image: Container | None = None,
                run_name: str = HOSTILE) -> tuple[subprocess.CompletedProcess, list[str]]:
    """The completed script and the arguments python got."""
    bin_dir = _stand_ins(tmp_path / "bin", node_addr=node_addr)
    canary = tmp_path / "canary"
    request = _request(python=str(bin_dir / "python-stand-in"), env={"NCCL_DEBUG": "INFO"}, container=image)
    text = script.render(request, suite_file=tmp_path / run_name / "suite.toml", run_dir=tmp_path / run_name)
    (tmp_path / "job.sbatch").write_text(text)
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "321", "SLURM_JOB_NODELIST": "n[1-2]",
               "SLURMD_NODENAME": "n2", "CANARY": str(canary), "ARGS_FILE": str(tmp_path / "args"),
               "SRUN_OPTIONS_FILE": str(tmp_path / "srun-options")}
    completed = subprocess.run(["bash", str(tmp_path / "job.sbatch")], env=environ, capture_output=True, text=True,
                               timeout=60)
    args = (tmp_path / "args").read_text().splitlines() if (tmp_path / "args").exists() else []
    return completed, args


def test_each_nodes_torchrun_publishes_its_own_node_addr(tmp_path):
    completed, args = _run_script(tmp_path, node_addr="10.1.2.3")
    assert completed.returncode == 0, completed.stderr
    assert args[:3] == ["-m", "torch.distributed.run", "--local-addr=10.1.2.3"]  # before torchrun's program
    assert "--rdzv-endpoint=10.1.2.3:" + str(20000 + 321 % 20000) in args
    assert "--nnodes=2" in args and "--nproc-per-node=8" in args and args.index("-m", 1) > 2
    # user values reach torchrun as the words they are, nothing in them run
    assert str(tmp_path / HOSTILE / "suite.toml") in args and str(tmp_path / HOSTILE) in args
    assert not list(tmp_path.glob("canary*"))
    assert "commbench: node n2 publishes --local-addr=10.1.2.3" in completed.stderr


def test_without_an_answer_from_scontrol_the_host_name_is_published(tmp_path):
    completed, args = _run_script(tmp_path, node_addr=None)
    assert completed.returncode == 0, completed.stderr
    assert args[:3] == ["-m", "torch.distributed.run", "--local-addr=fallback-host"]


def test_the_script_passes_bash_syntax_check(tmp_path):
    text = script.render(_request(), suite_file=tmp_path / "s.toml", run_dir=tmp_path)
    (tmp_path / "job.sbatch").write_text(text)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")]).returncode == 0
    assert os.access(tmp_path / "job.sbatch", os.R_OK)


def test_in_a_container_image_the_step_gets_pyxis_options_and_the_run_folder_mounted(tmp_path):
    """--container-image: srun gets pyxis' --container-image and --container-mounts, each one word, the run folder
    mounted at its own path before the user's mounts; the node addresses come from the batch script (outside the
    image, which need not hold scontrol), so torchrun still publishes its node's NodeAddr."""
    image = Container("nvcr.io#nvidia/pytorch:26.07-py3", ("/data:/data:ro",))
    completed, args = _run_script(tmp_path, node_addr="10.1.2.3", image=image, run_name="run-1")
    assert completed.returncode == 0, completed.stderr
    options = (tmp_path / "srun-options").read_text().splitlines()
    run_dir = tmp_path / "run-1"
    assert "--container-image=nvcr.io#nvidia/pytorch:26.07-py3" in options
    assert f"--container-mounts={run_dir}:{run_dir},/data:/data:ro" in options
    assert args[:3] == ["-m", "torch.distributed.run", "--local-addr=10.1.2.3"]


def test_without_a_container_srun_gets_no_pyxis_option(tmp_path):
    completed, _ = _run_script(tmp_path, node_addr="10.1.2.3")
    assert completed.returncode == 0, completed.stderr
    assert not [option for option in (tmp_path / "srun-options").read_text().splitlines() if "container" in option]


@pytest.mark.no_process
def test_a_run_folder_pyxis_cannot_mount_is_refused(tmp_path):
    with pytest.raises(CommbenchError, match="cannot be mounted"):
        script.render(_request(container=Container("img:1")), suite_file=tmp_path / "a,b" / "s.toml",
                      run_dir=tmp_path / "a,b")
