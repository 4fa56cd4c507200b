"""`commbench run SUITE`: every bench of a TOML suite into one run folder, then each bench's table and the verdict."""

import sys
from pathlib import Path

import click

from commbench.cli.options import run_options
from commbench.cli.run_job import EXIT_RUN_FAILED, show_results, show_teardown, verdict
from commbench.store import STATUS_COMPLETE


@click.command(name="run")
@click.argument("suite")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default=None,
              help="Override the suite's backend.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None, help="Override the suite's device.")
@click.option("--nproc", type=int, default=None, help="Override the suite's rank count.")
@click.option("--into", type=click.Path(path_type=Path, file_okay=False), default=None, hidden=True,
              help="Fill this existing run folder (made by `commbench slurm submit`) instead of a new one.")
@run_options
def run(suite, backend, device, nproc, into, out, run_id, quiet) -> None:
    """Run the benches of SUITE (a .toml file, or a shipped suite's name: default, cpu-ci, nccl-tests, ddp-buckets,
    fsdp-prefetch, zero-stages) into one run folder, in one launch where the benches allow.

    Every bench is validated before anything launches. Exit codes: 0 all correct, 1 a check failed, 2 bad input,
    3 a bench failed (the benches after it do not run).
    """
    run_suite_command(suite, overrides={"backend": backend, "device": device, "nproc": nproc}, into=into, out=out,
                      run_id=run_id, quiet=quiet)


def run_suite_command(suite_name, *, overrides: dict, into: Path | None, out: Path, run_id: str | None,
                      quiet: bool) -> None:
    from commbench.suite.load import load_suite
    from commbench.suite.run import run_suite

    suite = load_suite(suite_name, overrides=overrides)
    outcome = run_suite(suite, out=out, run_id=run_id, into=into, argv=["commbench", *sys.argv[1:]], quiet=quiet)
    if outcome.run_dir is None:  # a rank other than 0 inside a job: rank 0 reports for everyone
        sys.exit(0 if outcome.status == STATUS_COMPLETE else EXIT_RUN_FAILED)
    codes = []
    for bench, result in outcome.benches:
        if not quiet:
            click.echo(f"\n## {bench.name} ({bench.kind}): {result.status}")
            show_results(bench.bench, result.results)
        show_teardown(result.teardown)
        codes.append(verdict(bench.bench, result.status, result.reason, result.n_wrong, name=f"bench {bench.name}"))
    click.echo(f"# Results: {outcome.run_dir}")
    sys.exit(max(codes, key=lambda code: {0: 0, 1: 1, EXIT_RUN_FAILED: 2}[code]) if codes else EXIT_RUN_FAILED)
