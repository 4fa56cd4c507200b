"""`commbench run SUITE`: every bench of a TOML suite into one run folder, then each bench's table and the verdict."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from commbench.cli.shared import (
    bench_document,
    finish_launches,
    launches_option,
    show_bench,
    show_warnings,
    table_run_options,
    verdict,
)
from commbench.cli.suites import complete_suite
from commbench.errors import ExitCode
from commbench.names import BACKEND_CHOICES, DEVICE_CHOICES, BackendChoice, DeviceChoice
from commbench.running.other_rank import OtherRank

if TYPE_CHECKING:
    from commbench.running.suite import SuiteRun
    from commbench.suite.run import SuiteOutcome

_SEVERITY = {ExitCode.OK: 0, ExitCode.WRONG_RESULTS: 1, ExitCode.RUN_FAILED: 2}


@click.command(name="run")
@click.argument("suite", shell_complete=complete_suite)
@click.option("--backend", type=click.Choice(BACKEND_CHOICES), default=None, help="Override the suite's backend.")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default=None, help="Override the suite's device.")
@click.option("--nproc", type=int, default=None, help="Override the suite's rank count.")
@click.option("--oversubscribe", is_flag=True, default=None,
              help="Allow more CPU ranks than cores (as the suite key oversubscribe = true).")
@click.option("--into", type=click.Path(path_type=Path, file_okay=False), default=None, hidden=True,
              help="Fill this existing run folder (made by `commbench slurm submit`) instead of a new one.")
@launches_option
@table_run_options
def run(suite: str, backend: BackendChoice | None, device: DeviceChoice | None, nproc: int | None,
        oversubscribe: bool | None, into: Path | None, out: Path, run_id: str | None, quiet: bool, as_json: bool,
        verbose: bool, launches: int) -> None:
    """Run the benches of SUITE (a .toml file, or a shipped suite's name: `commbench suites` lists them) into one run
    folder, in one launch where the benches allow.

    Every bench is validated before anything launches. Exit codes: 0 all correct, 1 a check failed, 2 bad input,
    3 a bench failed (the benches after it do not run).
    """
    overrides = {"backend": backend, "device": device, "nproc": nproc, "oversubscribe": oversubscribe or None}
    sys.exit(run_suite_command(suite, overrides=overrides, into=into, out=out, run_id=run_id, quiet=quiet,
                               as_json=as_json, verbose=verbose, launches=launches))


def run_suite_command(suite_name: str, *, overrides: Mapping[str, object], into: Path | None, out: Path,
                      run_id: str | None, quiet: bool, as_json: bool = False, verbose: bool = False,
                      launches: int = 1) -> int:
    """The suite run (commbench/running/suite.py), then each bench's table and the verdict; returns the exit code."""
    from commbench.running.suite import run_suite_launches

    argv = ["commbench", *sys.argv[1:]]
    # accepted: every bench is, so say what they will not measure as it seems, before the run
    ran = run_suite_launches(suite_name, overrides=overrides, into=into, out=out, run_id=run_id, quiet=quiet,
                             launches=launches, argv=argv, accepted=show_warnings)
    if isinstance(ran, OtherRank):  # rank 0 reports for everyone
        return ran.exit_code
    return finish_launches(ran.launches, _reporter(ran, quiet=quiet, as_json=as_json, verbose=verbose, argv=argv),
                           quiet=quiet, as_json=as_json, argv=argv)


def _reporter(ran: SuiteRun, *, quiet: bool, as_json: bool, verbose: bool,
              argv: list[str]) -> Callable[[SuiteOutcome, bool], tuple[ExitCode, dict[str, object]]]:
    """report(outcome, show) of one launch of the suite: each bench's table under a heading, its verdict, and the
    launch's --json document."""
    from commbench.store import STATUS_COMPLETE, STATUS_FAILED

    suite = ran.suite

    def report(outcome: SuiteOutcome, show: bool) -> tuple[ExitCode, dict[str, object]]:
        codes: list[ExitCode] = []
        benches: list[dict[str, object]] = []
        for bench, result in outcome.benches:
            # a heading between the tables of several benches (a lone bench's failure is said by its verdict);
            # -q and --json print none: stdout is one line or one document
            if show and len(suite.benches) > 1 and not (quiet or as_json):
                click.echo(f"\n## {bench.name} ({bench.command}): {result.status}")
            if show:
                show_bench(bench.bench, result, quiet=quiet, as_json=as_json, verbose=verbose)
            codes.append(verdict(bench.bench.kind, result, name=f"bench {bench.name}"))
            benches.append({"name": bench.name, "kind": bench.command,
                            **bench_document(bench.bench, result, codes[-1])})
        code = max(codes, key=_SEVERITY.__getitem__) if codes else ExitCode.RUN_FAILED
        return code, {"command": argv, "suite": suite.path, "description": suite.description,
                      "run_dir": outcome.run_dir, "status": STATUS_COMPLETE if outcome.ok else STATUS_FAILED,
                      "exit_code": int(code), "n_wrong": sum(result.n_wrong for _, result in outcome.benches),
                      "n_unchecked": sum(result.n_unchecked for _, result in outcome.benches),
                      "benches": benches}

    return report
