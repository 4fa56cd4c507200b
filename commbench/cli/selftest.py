"""`commbench selftest`: run every path this machine supports and print path → pass / FAIL / n/a."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from commbench.benches import KINDS
from commbench.cli.json_output import emit_json
from commbench.cli.shared import show_warnings, split_commas
from commbench.errors import CommbenchError, ExitCode
from commbench.names import AUTO, BACKEND_CHOICES, DEVICE_CHOICES, BackendChoice, DeviceChoice

if TYPE_CHECKING:
    from commbench.selftest.plan import Plan

STEP_NAMES = ", ".join(("sweep", "profile",
                        *(kind.command for kind in KINDS.values() if kind.selftest_values is not None),
                        "report", "compare"))
"""commbench.selftest.plan.STEPS, made here from the kinds' registry without importing the selftest package (which
loads pandas); tests/test_selftest.py checks the two agree."""


def _steps(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> tuple[str, ...]:
    """--only's steps; `--only ''` names none, which is refused rather than read as every step."""
    steps = split_commas(ctx, param, values)
    if values and not steps:
        raise CommbenchError(f"--only {','.join(values)!r} names no step; choose from {STEP_NAMES}, or leave "
                             "--only out to run them all")
    return steps


@click.command(name="selftest")
@click.option("--backend", type=click.Choice(BACKEND_CHOICES), default=AUTO, show_default=True,
              help="Process-group backend; auto = nccl on cuda, else gloo.")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default=AUTO, show_default=True,
              help="Tensor device; auto = cuda when a GPU is visible.")
@click.option("--nproc", type=int, default=None, help="Ranks on this machine [default: every visible GPU, else 2].")
@click.option("--oversubscribe", is_flag=True,
              help="Allow more CPU ranks than cores (passed on to every step's run; at most 8 per core).")
@click.option("--only", multiple=True, callback=_steps, metavar="STEP",
              help=f"Run only these steps ({STEP_NAMES}; report and compare bring the sweep); the other paths say "
                   "n/a [default: all].")
@click.option("--step-timeout", type=float, default=300.0, show_default=True,
              help="Seconds one step may take before it is stopped and fails; its sub-run's own hang watchdog "
                   "(--timeout) is half of it.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Folder that receives results/<run-id>/.")
@click.option("--run-id", default=None, help="Name of the run folder [default: selftest-<UTC time>-<host>].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (paths, run folder, wall time) on "
                                                       "stdout; progress stays on stderr.")
def selftest(backend: BackendChoice, device: DeviceChoice, nproc: int | None, oversubscribe: bool,
             only: tuple[str, ...], step_timeout: float, out: Path, run_id: str | None, as_json: bool) -> None:
    """Exercise every path this machine supports, each as a real commbench run into one run folder: every collective
    builtin and ring at a small and a large size (4 KiB and 4 MiB on CPU, 256 MiB on GPU) with the check, both timing
    modes, in and out of place; a profiled point and `trace analyze`; the NVML sampler on GPUs; a tiny ddp, fsdp and
    zero sweep; `report` and `compare` on the result. Prints path, result (pass, FAIL, n/a) and detail; on a GPU
    node, run it first.

    Exit codes: 0 every path that applies here passed, 1 a path failed, 2 bad input (nothing run).
    """
    from commbench.running.selftest import run_selftest_command
    from commbench.selftest import format_table

    def announce(line: str) -> None:
        click.echo(f"selftest: {line}", err=True)

    def started(plan: Plan, run_dir: Path) -> None:
        announce(f"{plan.backend} on {plan.device}, {plan.nproc} rank(s); run folder {run_dir}")

    # accepted: e.g. --oversubscribe past the cores: the input is accepted, say it before the steps run
    result = run_selftest_command(backend=backend, device=device, nproc=nproc, only=tuple(only),
                                  timeout_s=step_timeout, oversubscribe=oversubscribe, out=out, run_id=run_id,
                                  argv=["commbench", *sys.argv[1:]], accepted=show_warnings, started=started,
                                  announce=announce)
    if as_json:
        emit_json(result.document)
    else:
        click.echo(format_table(result))
    sys.exit(ExitCode.OK if result.ok else ExitCode.SELFTEST_FAILED)
