"""`commbench run SUITE`: every bench of a TOML suite into one run folder, then each bench's table and the verdict."""

import sys
from pathlib import Path

import click

from commbench.cli.shared import (
    bench_document,
    launches_option,
    other_rank_exit,
    run_launches,
    show_bench,
    show_warnings,
    table_run_options,
    verdict,
)
from commbench.cli.suites import complete_suite
from commbench.errors import ExitCode
from commbench.names import BACKEND_CHOICES, DEVICE_CHOICES

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
def run(suite, backend, device, nproc, oversubscribe, into, out, run_id, quiet, as_json, verbose, launches) -> None:
    """Run the benches of SUITE (a .toml file, or a shipped suite's name: `commbench suites` lists them) into one run
    folder, in one launch where the benches allow.

    Every bench is validated before anything launches. Exit codes: 0 all correct, 1 a check failed, 2 bad input,
    3 a bench failed (the benches after it do not run).
    """
    overrides = {"backend": backend, "device": device, "nproc": nproc, "oversubscribe": oversubscribe or None}
    run_suite_command(suite, overrides=overrides, into=into, out=out, run_id=run_id, quiet=quiet, as_json=as_json,
                      verbose=verbose, launches=launches)


def run_suite_command(suite_name, *, overrides: dict, into: Path | None, out: Path, run_id: str | None,
                      quiet: bool, as_json: bool = False, verbose: bool = False, launches: int = 1) -> None:
    from commbench.errors import CommbenchError
    from commbench.execution import torch_host
    from commbench.gate.run_set import Launched
    from commbench.store import STATUS_COMPLETE, STATUS_FAILED

    if into is not None and launches > 1:
        raise CommbenchError(f"--launches {launches} with --into: a Slurm job fills its one run folder")
    from commbench.suite.load import load_suite
    from commbench.suite.run import run_suite

    torch_host.start()
    import pandas  # noqa: F401 - the tables' import, here on one core while the host imports torch on another

    machine = torch_host.machine()
    suite = load_suite(suite_name, machine, overrides=overrides)
    show_warnings()  # every bench is accepted: say what they will not measure as it seems, before the run
    argv = ["commbench", *sys.argv[1:]]

    def launch(folder: Path, launch_id: str | None) -> Launched:
        outcome = run_suite(suite, machine, out=folder, run_id=launch_id, into=into, argv=argv, quiet=quiet)
        if outcome.run_dir is None:
            other_rank_exit(outcome.ok)

        def report(show: bool):
            codes, benches = [], []
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
                          "exit_code": int(code), "n_wrong": sum(bench["n_wrong"] for bench in benches),
                          "n_unchecked": sum(bench["n_unchecked"] for bench in benches),
                          "benches": benches}

        return Launched(outcome.run_dir, outcome.ok and not any(result.n_wrong for _, result in outcome.benches),
                        report)

    run_launches(launches, launch, out=out, run_id=run_id, quiet=quiet, as_json=as_json, machine=machine, argv=argv)
