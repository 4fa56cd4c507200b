"""`commbench slurm`: the rendered script (quoting, refusals) in process, and real jobs on a local Slurm cluster
(slurmctld + two slurmd on this host, installed from Debian packages by tests/local_slurm.py)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import commbench_env
from tests.local_slurm import LocalSlurm, unavailable_reason

# Everything a shell would act on: spaces, both quotes, command substitution, backticks, a command separator. Were any
# of it executed, a file $CANARY.N would appear (the variable keeps '/' out of the string, which also names folders).
HOSTILE = "we ird 'q' \"d\" $(touch $CANARY.1) `touch $CANARY.2`; touch $CANARY.3"


# What the jobs run: small, so a job's time is Slurm's and torchrun's, not the measurement's
TINY = """
backend = "gloo"
device = "cpu"

[[bench]]
name = "gate"
kind = "sweep"
collective = "all_reduce"
impl = "builtin"
sizes = "4K,64K"
iters = 6
"""


def _tiny(folder: Path, name: str = "tiny.toml") -> str:
    (folder / name).write_text(TINY)
    return str(folder / name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with LocalSlurm(nodes=2, workdir=tmp_path_factory.mktemp("slurm")) as running:
        daemons = [process.pid for process in running.daemons]
        yield running
    # every daemon the tests started is gone (stopped by its PID, whatever the tests did)
    assert daemons and not [pid for pid in daemons if Path(f"/proc/{pid}").exists()]


def _canary(tmp_path: Path) -> tuple[Path, dict]:
    """Where an executed HOSTILE would leave files, and the environment that says so."""
    canary = tmp_path / "canary"
    return canary, {"CANARY": str(canary)}


def _canaries(canary: Path) -> list[Path]:
    return [path for path in canary.parent.iterdir() if path.name.startswith(canary.name)]


def _client_env(cluster, **extra: str) -> dict:
    """A clean commbench environment that finds the test cluster's slurm.conf."""
    return {**commbench_env(**extra), "SLURM_CONF": cluster.env["SLURM_CONF"]}


def _submit(cluster, cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", "slurm", "submit", *args, "--partition",
                           cluster.partition, "--wait", "--wait-timeout", "180", "--poll", "0.5"],
                          cwd=cwd, env=_client_env(cluster, **(env or {})), capture_output=True, text=True,
                          timeout=300)


def _status(cluster, run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commbench", "slurm", "status", str(run_dir)], env=cluster.env,
                          capture_output=True, text=True, timeout=60)


def _run_dir(completed: subprocess.CompletedProcess) -> Path:
    return Path(re.search(r"^# Results: (.+)$", completed.stdout, re.M).group(1))


def _job_id(completed: subprocess.CompletedProcess) -> str:
    return re.search(r"^Submitted batch job (\d+)$", completed.stdout, re.M).group(1)


@pytest.mark.no_process
@pytest.mark.parametrize("args, fragment", [
    (["--job-name", "a b"], "--job-name 'a b' cannot go into an #SBATCH line"),
    (["--partition", "x;y"], "--partition 'x;y' cannot go into an #SBATCH line"),
    (["--sbatch-arg=--mem=1 --exclusive"], "is not one sbatch option"),
    (["--time", "an hour"], "--time 'an hour' is not a Slurm time"),
    (["--env", "NOT-A-NAME=1"], "--env 'NOT-A-NAME' is not an environment variable name"),
    (["--env", "COMMBENCH_UNSET_FOR_TEST"], "--env COMMBENCH_UNSET_FOR_TEST: not set in this shell"),
    (["--nodes", "0"], "--nodes 0 is not a node count"),
    (["--rdzv-port", "80"], "--rdzv-port 80 is not a usable port"),
    (["--sbatch-arg=--output=x"], "commbench sets --output itself"),
    (["--poll", "0"], "Invalid value for '--poll': '0' is not a finite number above 0"),
    (["--container-image", "a b"], "--container-image 'a b' is not an image pyxis reads"),
    (["--container-image", "img:1", "--container-mounts", "/a"], "--container-mounts '/a' is not one SRC:DST"),
    (["--container-mounts", "/a:/a"], "--container-mounts needs --container-image"),
])
def test_unsafe_or_impossible_submissions_are_refused(tmp_path, commbench_cli, args, fragment):
    base = {"--nodes": "1", "--gpus-per-node": "0"}
    for option in args:
        base.pop(option, None)
    flat = [item for pair in base.items() for item in pair]
    outcome = commbench_cli("slurm", "submit", "cpu-ci", *flat, *args, "--out", str(tmp_path / "results"))
    assert outcome.returncode == 2, outcome
    assert len(outcome.stderr.strip().splitlines()) == 1 and fragment in outcome.stderr, outcome.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.no_process
def test_submit_without_slurm_says_so_and_creates_nothing(tmp_path, commbench_cli, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    outcome = commbench_cli("slurm", "submit", "cpu-ci", "--nodes", "1", "--gpus-per-node", "0", "--out",
                            str(tmp_path / "results"))
    assert outcome.returncode == 2 and "`sbatch` is not on PATH" in outcome.stderr
    assert not (tmp_path / "results").exists()


def test_a_container_image_without_pyxis_is_refused_before_anything_is_made(cluster, tmp_path):
    """The local cluster's srun has no pyxis: sbatch would take the job and its step would fail on the nodes, so
    submit refuses first, in one line, and creates no run folder."""
    outcome = subprocess.run([sys.executable, "-m", "commbench", "slurm", "submit", _tiny(tmp_path), "--nodes", "1",
                              "--gpus-per-node", "0", "--container-image", "nvcr.io#nvidia/pytorch:26.07-py3",
                              "--partition", cluster.partition, "--out", str(tmp_path / "results")],
                             cwd=tmp_path, env=_client_env(cluster), capture_output=True, text=True, timeout=120)
    assert outcome.returncode == 2, outcome
    assert len(outcome.stderr.strip().splitlines()) == 1 and "pyxis" in outcome.stderr, outcome.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.no_process
def test_suite_is_validated_for_the_compute_nodes_not_this_one(commbench_cli, tmp_path):
    # nccl-tests needs GPUs: fine for 8-GPU nodes even from this GPU-less machine, refused for CPU nodes
    ok = commbench_cli("slurm", "submit", "nccl-tests", "--nodes", "2", "--gpus-per-node", "8", "--dry-run",
                       "--out", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert "--nnodes=2 --nproc-per-node=8" in ok.stdout and "#SBATCH --gpus-per-node=8" in ok.stdout
    refused = commbench_cli("slurm", "submit", "nccl-tests", "--nodes", "2", "--gpus-per-node", "0", "--dry-run")
    assert refused.returncode == 2 and "no CUDA GPU is visible" in refused.stderr
    assert not list(tmp_path.iterdir())  # --dry-run creates nothing


def test_dry_run_script_quotes_every_user_value(tmp_path, commbench_cli):
    hostile, (canary, env) = HOSTILE, _canary(tmp_path)
    outcome = commbench_cli("slurm", "submit", "cpu-ci", "--nodes", "2", "--gpus-per-node", "0", "--nproc-per-node",
                            "1", "--env", f"NCCL_DEBUG_SUBSYS={hostile}", "--out", str(tmp_path / hostile),
                            "--run-id", "r1", "--exclusive", "--time", "00:10:00", "--sbatch-arg=--mem=0",
                            "--dry-run")
    assert outcome.returncode == 0, outcome.stderr
    text = outcome.stdout
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --exclusive", "#SBATCH --time=00:10:00",
                 "#SBATCH --mem=0", "--rdzv-backend=c10d", '--rdzv-id="$SLURM_JOB_ID"', "--nnodes=2"):
        assert line in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    # what bash makes of the export and the commbench arguments: the literal strings, and nothing executed
    exports = [line for line in text.splitlines() if line.startswith("export ")]
    probe = "\n".join([*exports, 'printf "%s\\n" "$NCCL_DEBUG_SUBSYS"'])
    echoed = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, env={**os.environ, **env})
    assert echoed.stdout == hostile + "\n"
    assert str(tmp_path / hostile / "r1") in subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + text.split("--into ", 1)[1].split(" --quiet")[0]],
        capture_output=True, text=True, env={**os.environ, **env}).stdout
    assert not _canaries(canary)


@pytest.mark.distributed
def test_one_node_job_with_hostile_names_runs_and_executes_nothing(cluster, tmp_path):
    hostile, (canary, env) = HOSTILE, _canary(tmp_path)
    suite_dir = tmp_path / hostile
    suite_dir.mkdir()
    completed = _submit(cluster, tmp_path, _tiny(suite_dir, "gate suite.toml"), "--nodes", "1", "--gpus-per-node",
                        "0", "--nproc-per-node", "2", "--env", f"NCCL_DEBUG_SUBSYS={hostile}", "--out",
                        str(tmp_path / hostile / "results"), env=env)  # the job inherits CANARY (sbatch exports all)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    run_dir, job_id = _run_dir(completed), _job_id(completed)
    assert run_dir.parent == tmp_path / hostile / "results"
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["slurm_job_id"] == job_id and meta["slurm_state"] == "COMPLETED"
    bench = json.loads((run_dir / "gate" / "meta.json").read_text())
    assert bench["world_size"] == 2 and bench["slurm_job_id"] == job_id
    assert bench["env"]["NCCL_DEBUG_SUBSYS"] == hostile  # reached the ranks as the literal string
    results = pd.read_csv(run_dir / "gate" / "results.csv")
    assert len(results) == 2 and (results["n_wrong"] == 0).all()
    assert f"# Report: {run_dir / 'report' / 'report.html'}" in completed.stdout
    assert (run_dir / f"slurm-{job_id}.out").exists()
    assert not _canaries(canary)

    status = _status(cluster, run_dir)
    assert status.returncode == 0, status.stderr
    assert f"job {job_id}: COMPLETED" in status.stdout and "bench gate: complete, 2 row(s)" in status.stdout


@pytest.mark.distributed
def test_two_node_job_meets_through_c10d_rendezvous_and_its_wrong_result_exits_1(cluster, tmp_path):
    # rank 1 (on the second node) corrupts one element: the check, summed over both nodes' ranks, must count it
    completed = _submit(cluster, tmp_path, _tiny(tmp_path), "--nodes", "2", "--gpus-per-node", "0",
                        "--nproc-per-node", "1", "--out", "results", "--env", "COMMBENCH_FAULT=wrong:1:0")
    assert completed.returncode == 1, completed.stdout + completed.stderr
    run_dir, job_id = _run_dir(completed), _job_id(completed)
    log = (run_dir / f"slurm-{job_id}.out").read_text()
    assert re.search(rf"job {job_id} on n\[1-2\]; rendezvous 127\.0\.0\.1:\d+", log), log
    # each node's torchrun published its own NodeAddr (node names n1, n2 do not resolve here)
    assert "commbench: node n1 publishes --local-addr=127.0.0.1" in log, log
    assert "commbench: node n2 publishes --local-addr=127.0.0.1" in log, log
    bench = json.loads((run_dir / "gate" / "meta.json").read_text())
    assert bench["status"] == "complete" and bench["world_size"] == 2
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "complete"  # the run finished; rows decide
    assert pd.read_csv(run_dir / "gate" / "results.csv")["n_wrong"].tolist() == [1, 0]
    assert "bench gate: 1 wrong element(s) in the check" in completed.stderr
    assert f"# Report: {run_dir / 'report' / 'report.html'}" in completed.stdout


@pytest.mark.distributed
def test_cancelled_job_is_reported_while_waiting(cluster, tmp_path):
    waiting = subprocess.Popen([sys.executable, "-m", "commbench", "slurm", "submit", "cpu-ci", "--nodes", "1",
                                "--gpus-per-node", "0", "--out", "results", "--wait", "--poll", "0.5"], cwd=tmp_path,
                               env=_client_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = waiting.stdout.readline()
    job_id = re.match(r"Submitted batch job (\d+)", first).group(1)
    subprocess.run(["scancel", job_id], env=cluster.env, check=True, timeout=30)
    stdout, stderr = waiting.communicate(timeout=120)
    assert waiting.returncode == 3, stdout + stderr
    assert f"commbench: slurm job {job_id} ended CANCELLED" in stderr and f"slurm-{job_id}.out" in stderr


TWO_BENCHES = """
backend = "gloo"
device = "cpu"

[[bench]]
name = "first"
kind = "sweep"
collective = "all_reduce"
impl = "builtin"
sizes = "4K,64K"
iters = 6

[[bench]]
name = "second"
kind = "sweep"
collective = "all_gather"
impl = "builtin"
sizes = "4K"
iters = 6
"""


@pytest.mark.distributed
def test_failed_job_is_reported_with_its_log(cluster, tmp_path):
    (tmp_path / "two.toml").write_text(TWO_BENCHES)
    completed = _submit(cluster, tmp_path, "two.toml", "--nodes", "1", "--gpus-per-node", "0", "--out", "results",
                        "--env", "COMMBENCH_FAULT=kill:1:1")
    assert completed.returncode == 3, completed.stdout + completed.stderr
    run_dir, job_id = _run_dir(completed), _job_id(completed)
    message = completed.stderr.strip().splitlines()[-1]
    assert message.startswith(f"commbench: slurm job {job_id} ended FAILED")
    assert f"log: {run_dir / f'slurm-{job_id}.out'}" in message
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "failed" and meta["slurm_state"] == "FAILED"
    assert len(pd.read_csv(run_dir / "first" / "results.csv")) == 1  # the row before the kill is kept
    for bench in ("first", "second"):  # nothing is left saying `running`
        assert json.loads((run_dir / bench / "meta.json").read_text())["status"] == "failed"
    status = _status(cluster, run_dir)
    assert status.returncode == 3 and f"job {job_id}: FAILED" in status.stdout
    assert "bench second: failed" in status.stdout
