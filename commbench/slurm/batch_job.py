"""`commbench slurm submit`'s work before the wait: the job request made from the options and checked, the suite
loaded as the compute nodes will resolve it, then either the batch script a --dry-run prints or the submitted job
(commbench/slurm/submission.py). Waiting for it is collect.py's."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench import store
from commbench.batch.fields import check_text_field
from commbench.errors import CommbenchError
from commbench.slurm import container, script

if TYPE_CHECKING:
    from commbench.slurm.submission import Submitted
    from commbench.suite.load import Suite


@dataclass(frozen=True)
class Nodes:
    """What the job runs on: its nodes, their GPUs and ranks, and the Python (or image) that runs the ranks."""

    nodes: int
    gpus_per_node: int
    nproc_per_node: int | None = None
    """None: --gpus-per-node, or 2 on CPU nodes."""
    python: str | None = None
    """None: this interpreter, or the image's python3."""
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreparedJob:
    """A checked job request, the suite it runs as loaded for the compute nodes, and the folder its run goes in."""

    request: script.JobRequest
    suite: Suite
    out: Path


def prepare_job(suite: str, where: Nodes, sbatch: script.SbatchOptions, *, env: tuple[str, ...],
                job_name: str | None, rdzv_port: int | None, overrides: dict[str, str | None], out_text: str,
                run_id: str | None) -> PreparedJob:
    """The request the options make, refused (CommbenchError) before anything is created where it cannot be
    written safely or cannot run, or where the suite is bad on the compute nodes."""
    from commbench.machine import Machine
    from commbench.suite.load import load_suite

    out = _check_destination(suite, out_text, run_id)
    # not `or`: an explicit 0 must reach validate() and be refused, not become 2
    nproc_per_node = where.nproc_per_node if where.nproc_per_node is not None else where.gpus_per_node or 2
    image = container.from_options(where.container_image, where.container_mounts)
    if image:
        container.check_mountable(out.resolve())
    # this machine's interpreter path means nothing inside an image: the image's python3 runs
    python = where.python if where.python is not None else "python3" if image else sys.executable
    request = script.JobRequest(
        nodes=where.nodes, gpus_per_node=where.gpus_per_node, nproc_per_node=nproc_per_node,
        **asdict(sbatch), env=script.job_env(env, dict(os.environ)), rdzv_port=rdzv_port,
        python=python, job_name=job_name if job_name is not None else _default_job_name(suite),
        run_options=tuple(arg for key, value in overrides.items() if value for arg in (f"--{key}", value)),
        container=image)
    script.validate(request)
    # Validate the suite as it will resolve on the compute nodes, not on this (login) node.
    loaded = load_suite(suite, Machine.for_job(nodes=where.nodes, ranks_per_node=nproc_per_node,
                                               gpus_per_node=where.gpus_per_node), overrides=dict(overrides))
    return PreparedJob(request, loaded, out)


def _default_job_name(suite: str) -> str:
    return f"commbench-{re.sub(r'[^A-Za-z0-9_.-]', '-', Path(suite).stem)}"


def _check_destination(suite: str, out_text: str, run_id: str | None) -> Path:
    """The suite, --out and --run-id, checked the same way with and without --dry-run; returns --out."""
    check_text_field("SUITE", suite)
    check_text_field("--out", out_text)
    if run_id is not None:
        store.check_run_id(run_id)  # what a submit's create_run_dir refuses, --dry-run refuses too
    return Path(out_text)


def dry_run_script(job: PreparedJob, run_id: str | None) -> str:
    """The batch script a submit would write; creates nothing."""
    from commbench.suite.run import SUITE_FILE

    run_dir = (job.out / (run_id or store.default_run_id())).resolve()
    if run_id is not None and run_dir.exists():  # what create_run_dir refuses, refused here too
        raise CommbenchError(f"{run_dir} already exists; choose another --run-id")
    return script.render(job.request, suite_file=run_dir / SUITE_FILE, run_dir=run_dir)


def submit_job(job: PreparedJob, *, run_id: str | None, argv: list[str]) -> Submitted:
    """The run folder made, the batch script written, the job submitted (submission.submit)."""
    from commbench.slurm import submission  # records the run (runinfo, NVML): loaded only to submit
    from commbench.suite.run import SUITE_FILE

    return submission.submit(job.request, suite_path=job.suite.path, suite_text=job.suite.text,
                             suite_file=SUITE_FILE, out=job.out, run_id=run_id, argv=argv)
