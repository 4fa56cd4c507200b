"""A suite submitted as a Slurm batch job, recorded in its run folder: the suite's copy the job runs, the batch
script, meta.json (status submitted, then the job id and log), and, once the job ends, what the folder says when no
rank could say it (a job killed before its ranks wrote their end). `commbench slurm` parses and prints around this."""

from dataclasses import dataclass
from pathlib import Path

from commbench import runinfo, store
from commbench.errors import CommbenchError
from commbench.slurm import container, jobs, script

SCRIPT_FILE = "job.sbatch"
STATUS_SUBMITTED = "submitted"
"""meta.json's status from sbatch's acceptance until rank 0 of the job writes its own."""


@dataclass(frozen=True)
class Submitted:
    run_dir: Path
    job_id: str
    log_path: Path


def submit(request: script.JobRequest, *, suite_path: Path, suite_text: str, suite_file: str, out: Path,
           run_id: str | None, argv: list[str]) -> Submitted:
    """Create the run folder, write the suite's copy and the batch script, record the submission, submit it held
    and release it once meta.json names the job (so rank 0 finds the record). A refusal by sbatch is recorded as the
    run's failure and raised again."""
    jobs.require_client()
    if request.container is not None:
        container.require_pyxis()
    run_dir = store.create_run_dir(out, run_id).resolve()
    (run_dir / suite_file).write_text(suite_text, encoding="utf-8")  # the job runs this copy, edits or not
    script_path = run_dir / SCRIPT_FILE
    script_path.write_text(script.render(request, suite_file=run_dir / suite_file, run_dir=run_dir),
                           encoding="utf-8")
    store.write_meta(run_dir, {
        **runinfo.launch_meta(argv, run_dir.name), "kind": store.SUITE_KIND,
        "suite": str(suite_path), "status": STATUS_SUBMITTED, "slurm_script": str(script_path),
        "slurm_request": {"nodes": request.nodes, "gpus_per_node": request.gpus_per_node,
                          "nproc_per_node": request.nproc_per_node, "partition": request.partition,
                          "account": request.account, "time": request.time,
                          "cpus_per_task": script.cpus_per_task(request)[0], "exclusive": request.exclusive,
                          "container_image": request.container.image if request.container else None}})
    try:
        job_id = jobs.submit(script_path, cwd=run_dir)
        log_path = run_dir / script.LOG_PATTERN.replace("%j", job_id)
        store.update_meta(run_dir, slurm_job_id=job_id, slurm_log=str(log_path))
        jobs.release(job_id)  # only now may rank 0 write meta.json
    except CommbenchError as error:
        store.update_meta(run_dir, status=store.STATUS_FAILED, reason=str(error), end_time=runinfo.utc_now())
        raise
    return Submitted(run_dir, job_id, log_path)


def job_problem(final: jobs.JobState, meta: dict, run_dir: Path, log_path: Path) -> str:
    """One line: how the job ended, what the run said, where to look."""
    run_status, run_reason = meta.get("status"), meta.get("reason")
    if final.state == jobs.ENDED_OK:
        # srun can exit 0 although its tasks never started: the run folder is the proof, not the job state
        problem = (f"slurm job {final.job_id} COMPLETED but the run did not finish (run status {run_status}"
                   f"{': ' + run_reason if run_reason else ''})")
    else:
        state = "no longer known to scontrol" if final.state == jobs.GONE else f"ended {final.state}"
        problem = (f"slurm job {final.job_id} {state} (exit code {final.exit_code or '?'}"
                   f"{', reason ' + final.reason if final.reason and final.reason != 'None' else ''})"
                   f"{'; the run says: ' + run_reason if run_reason else ''}")
    return f"{problem}; log: {log_path}; results so far: {run_dir}"


def mark_failed(run_dir: Path, problem: str, state: str) -> None:
    """The suite and every bench that no rank could close say failed (a killed job leaves them `running`)."""
    now = runinfo.utc_now()
    if store.read_meta(run_dir).get("status") != store.STATUS_FAILED:
        store.update_meta(run_dir, status=store.STATUS_FAILED, reason=problem, end_time=now)
    for bench_dir in (store.suite_bench_dirs(run_dir) or {}).values():
        if (bench_dir / store.META_FILE).exists() and store.read_meta(bench_dir).get("status") == \
                store.STATUS_RUNNING:
            store.update_meta(bench_dir, status=store.STATUS_FAILED, reason=f"the Slurm job ended {state} first",
                              end_time=now)
