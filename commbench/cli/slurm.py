"""`commbench slurm submit SUITE` and `commbench slurm status RUN_DIR`: a suite as a multi-node Slurm batch job."""

import os
import re
import sys
from pathlib import Path

import click

from commbench import store
from commbench.cli.shared import POSITIVE_NUMBER
from commbench.errors import CommbenchError, ExitCode
from commbench.names import BACKEND_CHOICES, DEVICE_CHOICES
from commbench.slurm import container, jobs, script

REPORT_DIR = "report"


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
def submit(suite, nodes, gpus_per_node, nproc_per_node, partition, account, time_limit, qos, constraint, exclusive,
           cpus_per_task, sbatch_args, env, job_name, rdzv_port, python, container_image, container_mounts,
           backend, device, run_id, dry_run, wait_, wait_timeout, poll, out_text) -> None:
    """Write the batch script for SUITE into results/<run-id>/, submit it with sbatch, and (--wait) collect it.

    Exit codes: 0 submitted (or, with --wait, completed with correct results), 1 (--wait) a check found wrong
    results, 2 bad input or sbatch refused, 3 the job failed, was cancelled, timed out, or is still running at
    --wait-timeout.
    """
    from commbench.machine import Machine
    from commbench.suite.load import load_suite
    from commbench.suite.run import SUITE_FILE

    out = _check_destination(suite, out_text, run_id)
    if nproc_per_node is None:  # not `or`: an explicit 0 must reach validate() and be refused, not become 2
        nproc_per_node = gpus_per_node or 2
    overrides = {"backend": backend, "device": device}
    image = container.from_options(container_image, tuple(container_mounts))
    if image:
        container.check_mountable(out.resolve())
    if python is None:  # this machine's interpreter path means nothing inside an image: the image's python3 runs
        python = "python3" if image else sys.executable
    request = script.JobRequest(
        nodes=nodes, gpus_per_node=gpus_per_node, nproc_per_node=nproc_per_node, partition=partition,
        account=account, qos=qos, constraint=constraint, time=time_limit, cpus_per_task=cpus_per_task,
        exclusive=exclusive, sbatch_args=tuple(sbatch_args),
        env=script.job_env(tuple(env), dict(os.environ)), rdzv_port=rdzv_port, python=python,
        job_name=job_name if job_name is not None else f"commbench-{re.sub(r'[^A-Za-z0-9_.-]', '-', Path(suite).stem)}",
        run_options=tuple(arg for key, value in overrides.items() if value for arg in (f"--{key}", value)),
        container=image)
    script.validate(request)
    # Validate the suite as it will resolve on the compute nodes, not on this (login) node.
    loaded = load_suite(suite, Machine.for_job(nodes=nodes, ranks_per_node=nproc_per_node,
                                               gpus_per_node=gpus_per_node), overrides=overrides)
    if dry_run:
        run_dir = (out / (run_id or store.default_run_id())).resolve()
        if run_id is not None and run_dir.exists():  # what create_run_dir refuses, refused here too
            raise CommbenchError(f"{run_dir} already exists; choose another --run-id")
        # color=True: click.echo would otherwise strip escape sequences (an --env value may hold one) when stdout is
        # not a terminal, and print a script other than the one a submit writes
        click.echo(script.render(request, suite_file=run_dir / SUITE_FILE, run_dir=run_dir), nl=False, color=True)
        return
    from commbench.slurm import submission  # records the run (runinfo, NVML): loaded only to submit

    submitted = submission.submit(request, suite_path=loaded.path, suite_text=loaded.text, suite_file=SUITE_FILE,
                                  out=out, run_id=run_id, argv=["commbench", *sys.argv[1:]])
    run_dir, job_id, log_path = submitted.run_dir, submitted.job_id, submitted.log_path
    click.echo(f"Submitted batch job {job_id}\n# Results: {run_dir}\n# Log: {log_path}")
    if wait_:
        sys.exit(_collect(run_dir, job_id, log_path, timeout_s=wait_timeout, poll_s=poll))


def _check_destination(suite: str, out_text: str, run_id: str | None) -> Path:
    """The suite, --out and --run-id, checked the same way with and without --dry-run; returns --out."""
    script.check_text_field("SUITE", suite)
    script.check_text_field("--out", out_text)
    if run_id is not None:
        store.check_run_id(run_id)  # what a submit's create_run_dir refuses, --dry-run refuses too
    return Path(out_text)


def _collect(run_dir: Path, job_id: str, log_path: Path, *, timeout_s: float, poll_s: float) -> int:
    """Wait for the job. When its ranks finished the suite, the rows decide (report; exit 1 on wrong results);
    otherwise say how the job ended and where its log is, and make meta.json say so."""
    final = jobs.wait(job_id, timeout_s=timeout_s, poll_s=poll_s,
                      on_change=lambda state: click.echo(f"# job {job_id}: {state.state}", err=True))
    if final is None:
        click.echo(f"commbench: slurm job {job_id} has not ended after {timeout_s:g} s (--wait-timeout); it keeps "
                   f"running: `commbench slurm status {run_dir}` or `scancel {job_id}`", err=True)
        return ExitCode.RUN_FAILED
    store.update_meta(run_dir, slurm_state=final.state, slurm_exit_code=final.exit_code)
    meta = store.read_meta(run_dir)
    if meta.get("status") != store.STATUS_COMPLETE:
        from commbench.slurm import submission

        problem = submission.job_problem(final, meta, run_dir, log_path)
        submission.mark_failed(run_dir, problem, final.state)
        click.echo(f"commbench: {problem}", err=True)
        return ExitCode.RUN_FAILED
    from commbench.report.render import render
    from commbench.runs import bench_dirs, kind_of, read_outcome

    report = render([run_dir], run_dir / REPORT_DIR)
    click.echo(f"# Report: {report.out / 'report.html'}")
    if final.state not in (jobs.ENDED_OK, jobs.GONE):  # e.g. a rank that aborted in teardown after the last row
        click.echo(f"# note: slurm job {job_id} ended {final.state} after the run completed; log: {log_path}")
    code = ExitCode.OK
    for name, bench_dir in bench_dirs(run_dir).items():  # each bench says what its exit code 1 means
        if (bench_dir / store.META_FILE).exists():
            kind = kind_of(bench_dir)
            wrong = read_outcome(kind, bench_dir).n_wrong
            if wrong:
                click.echo(f"commbench: bench {name}: {kind.wrong_message.format(n=wrong)}", err=True)
                code = ExitCode.WRONG_RESULTS
    return code



@slurm.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
def status(run_dir) -> None:
    """The Slurm state of a submitted run, its own status, and the rows each bench has written.

    Exit codes: 0 pending, running or completed; 2 not a submitted run; 3 the job or the run failed (or the job is
    gone from scontrol and the run never said complete).
    """
    meta = store.read_meta(run_dir)
    job_id = meta.get("slurm_job_id")
    if not job_id:
        raise CommbenchError(f"{run_dir} has no slurm_job_id in meta.json: it was not submitted by "
                             "`commbench slurm submit`")
    state = jobs.job_state(str(job_id))
    where = f" on {state.nodes}" if state.nodes and state.nodes != "(null)" else ""
    known = "no longer known to scontrol (ended over MinJobAge ago)" if state.state == jobs.GONE else state.state
    click.echo(f"job {job_id}: {known}{where}" + (f", run time {state.run_time}" if state.run_time else "") +
               (f", exit code {state.exit_code}" if state.exit_code else ""))
    click.echo(f"run: {meta.get('status')}" + (f" ({meta['reason']})" if meta.get("reason") else ""))
    from commbench.progress import RowCounter

    for name, bench_dir in (store.suite_bench_dirs(run_dir) or {}).items():
        rows = RowCounter(bench_dir / store.RESULTS_FILE)()
        bench_status = store.read_meta(bench_dir).get("status") if (bench_dir / store.META_FILE).exists() else \
            "not started"
        click.echo(f"  bench {name}: {bench_status}, {rows} row(s)")
    click.echo(f"# Log: {meta.get('slurm_log')}")
    unfinished = state.state == jobs.GONE and meta.get("status") != store.STATUS_COMPLETE
    if state.state in jobs.ENDED_BADLY or meta.get("status") == store.STATUS_FAILED or unfinished:
        sys.exit(ExitCode.RUN_FAILED)
