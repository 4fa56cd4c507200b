"""`commbench slurm submit SUITE` and `commbench slurm status RUN_DIR`: a suite as a multi-node Slurm batch job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from commbench.cli.shared import POSITIVE_NUMBER
from commbench.errors import CommbenchError, ExitCode
from commbench.names import BACKEND_CHOICES, DEVICE_CHOICES, BackendChoice, DeviceChoice
from commbench.slurm import jobs

if TYPE_CHECKING:
    from commbench.slurm.collect import Collected


@click.group()
def slurm() -> None:
    """Run suites as Slurm batch jobs: srun starts one torchrun per node, with c10d rendezvous on the first node."""


@slurm.command()
@click.argument("suite")
@click.option("--nodes", type=int, required=True, help="Nodes to allocate (one torchrun per node).")
@click.option("--gpus-per-node", type=int, required=True, help="GPUs per node to request (0 for CPU nodes).")
@click.option("--nproc-per-node", type=int, default=None,
              help="Ranks per node [default: --gpus-per-node, or 2 on CPU nodes].")
@click.option("--partition", default=None, help="sbatch --partition.")
@click.option("--account", default=None, help="sbatch --account.")
@click.option("--time", "time_limit", default=None, help="sbatch --time, e.g. 30, 01:00:00 or 1-00:00:00.")
@click.option("--qos", default=None, help="sbatch --qos.")
@click.option("--constraint", default=None, help="sbatch --constraint, e.g. h100.")
@click.option("--exclusive", is_flag=True,
              help="sbatch --exclusive (no other job on the nodes: quieter numbers, every CPU of the nodes).")
@click.option("--cpus-per-task", type=int, default=None,
              help="sbatch --cpus-per-task for each node's torchrun and its ranks [default on GPU nodes: 2 per rank + "
                   "1, unless --exclusive or an --sbatch-arg --cpus-per-gpu/--mincpus chooses; else Slurm's "
                   "default]. Slurm otherwise grants 1 CPU per task on shared nodes; the script says what it asked.")
@click.option("--sbatch-arg", "sbatch_args", multiple=True,
              help="Any other sbatch option, one per flag: --sbatch-arg=--mem=0 --sbatch-arg=--reservation=R.")
@click.option("--env", "env", multiple=True,
              help="NAME (its value here) or NAME=VALUE exported in the job; NCCL_*, TORCH_NCCL_* and GLOO_* set here "
                   "are exported anyway. Repeatable.")
@click.option("--job-name", default=None, help="Slurm job name [default: commbench-<suite file name>].")
@click.option("--rdzv-port", type=int, default=None,
              help="Port of the c10d rendezvous on the first node [default: 20000 + job id mod 20000].")
@click.option("--python", default=None,
              help="The Python (with commbench installed) that the nodes run [default: this one, "
                   f"{sys.executable}; python3 with --container-image].")
@click.option("--container-image", default=None,
              help="Run each node's ranks in this image through pyxis (srun --container-image), e.g. one built "
                   "from container/Dockerfile: REGISTRY#IMAGE:TAG or a .sqsh path. The run folder is mounted at its "
                   "own path.")
@click.option("--container-mounts", "container_mounts", multiple=True,
              help="Another SRC:DST[:FLAGS] mount for --container-image (e.g. /data:/data:ro). Repeatable.")
@click.option("--backend", type=click.Choice(BACKEND_CHOICES), default=None, help="Override the suite's backend.")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default=None, help="Override the suite's device.")
@click.option("--out", "out_text", default="results", show_default=True,
              help="Folder that receives results/<run-id>/ (on a file system the nodes share).")
@click.option("--run-id", default=None, help="Name of the run folder [default: UTC time + host].")
@click.option("--dry-run", is_flag=True, help="Print the batch script; create and submit nothing.")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the job to end, then write the report.")
@click.option("--wait-timeout", type=POSITIVE_NUMBER, default=3600.0, show_default=True,
              help="Seconds --wait waits before giving up (the job keeps running).")
@click.option("--poll", type=POSITIVE_NUMBER, default=2.0, show_default=True, help="Seconds between job-state polls.")
def submit(suite: str, nodes: int, gpus_per_node: int, nproc_per_node: int | None, partition: str | None,
           account: str | None, time_limit: str | None, qos: str | None, constraint: str | None, exclusive: bool,
           cpus_per_task: int | None, sbatch_args: tuple[str, ...], env: tuple[str, ...], job_name: str | None,
           rdzv_port: int | None, python: str | None, container_image: str | None,
           container_mounts: tuple[str, ...], backend: BackendChoice | None, device: DeviceChoice | None,
           run_id: str | None, dry_run: bool, wait_: bool, wait_timeout: float, poll: float, out_text: str) -> None:
    """Write the batch script for SUITE into results/<run-id>/, submit it with sbatch, and (--wait) collect it.

    Exit codes: 0 submitted (or, with --wait, completed with correct results), 1 (--wait) a check found wrong
    results, 2 bad input or sbatch refused, 3 the job failed, was cancelled, timed out, or is still running at
    --wait-timeout.
    """
    from commbench.slurm.batch_job import Nodes, dry_run_script, prepare_job, submit_job
    from commbench.slurm.script import SbatchOptions

    where = Nodes(nodes=nodes, gpus_per_node=gpus_per_node, nproc_per_node=nproc_per_node, python=python,
                  container_image=container_image, container_mounts=tuple(container_mounts))
    sbatch = SbatchOptions(partition=partition, account=account, qos=qos, constraint=constraint, time=time_limit,
                           cpus_per_task=cpus_per_task, exclusive=exclusive, sbatch_args=tuple(sbatch_args))
    job = prepare_job(suite, where, sbatch, env=tuple(env), job_name=job_name, rdzv_port=rdzv_port,
                      overrides={"backend": backend, "device": device}, out_text=out_text, run_id=run_id)
    if dry_run:
        # color=True: click.echo would otherwise strip escape sequences (an --env value may hold one) when stdout is
        # not a terminal, and print a script other than the one a submit writes
        click.echo(dry_run_script(job, run_id), nl=False, color=True)
        return
    submitted = submit_job(job, run_id=run_id, argv=["commbench", *sys.argv[1:]])
    run_dir, job_id, log_path = submitted.run_dir, submitted.job_id, submitted.log_path
    click.echo(f"Submitted batch job {job_id}\n# Results: {run_dir}\n# Log: {log_path}")
    if wait_:
        from commbench.slurm.collect import collect

        collected = collect(run_dir, job_id, log_path, timeout_s=wait_timeout, poll_s=poll,
                            on_change=lambda state: click.echo(f"# job {job_id}: {state.state}", err=True))
        sys.exit(_show_collected(collected, timeout_s=wait_timeout))


def _show_collected(collected: Collected, *, timeout_s: float) -> ExitCode:
    """How the job ended: still running at --wait-timeout, failed (where its log is), or the report and each bench
    whose check found wrong results; returns the exit code."""
    run_dir, job_id = collected.run_dir, collected.job_id
    if collected.final is None:
        click.echo(f"commbench: slurm job {job_id} has not ended after {timeout_s:g} s (--wait-timeout); it keeps "
                   f"running: `commbench slurm status {run_dir}` or `scancel {job_id}`", err=True)
    elif collected.problem is not None:
        click.echo(f"commbench: {collected.problem}", err=True)
    else:
        click.echo(f"# Report: {collected.report_html}")
        if collected.ended_late:  # e.g. a rank that aborted in teardown after the last row
            click.echo(f"# note: slurm job {job_id} ended {collected.final.state} after the run completed; log: "
                       f"{collected.log_path}")
        for name, message in collected.wrong:  # each bench says what its exit code 1 means
            click.echo(f"commbench: bench {name}: {message}", err=True)
    return collected.exit_code


@slurm.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
def status(run_dir: Path) -> None:
    """The Slurm state of a submitted run, its own status, and the rows each bench has written.

    Exit codes: 0 pending, running or completed; 2 not a submitted run; 3 the job or the run failed (or the job is
    gone from scontrol and the run never said complete).
    """
    from commbench.slurm.collect import job_status

    found = job_status(run_dir)
    if found is None:
        raise CommbenchError(f"{run_dir} has no slurm_job_id in meta.json: it was not submitted by "
                             "`commbench slurm submit`")
    state, meta = found.state, found.meta
    where = f" on {state.nodes}" if state.nodes and state.nodes != "(null)" else ""
    known = "no longer known to scontrol (ended over MinJobAge ago)" if state.state == jobs.GONE else state.state
    click.echo(f"job {found.job_id}: {known}{where}" + (f", run time {state.run_time}" if state.run_time else "") +
               (f", exit code {state.exit_code}" if state.exit_code else ""))
    click.echo(f"run: {meta.get('status')}" + (f" ({meta['reason']})" if meta.get("reason") else ""))
    for bench in found.benches:
        click.echo(f"  bench {bench.name}: {bench.status}, {bench.rows} row(s)")
    click.echo(f"# Log: {meta.get('slurm_log')}")
    if found.failed:
        sys.exit(ExitCode.RUN_FAILED)
