"""`commbench perf COLLECTIVE [nccl-tests flags]`: nccl-tests' command line, method and text, on torch.distributed.

The flags become the equivalent `commbench sweep` options (commbench/perf/flags.py) and run as a sweep does (one
launch, every point checked, a run folder); the output is then nccl-tests' text of that run folder, and -J its JSON."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from commbench.cli.shared import (
    CommandT,
    bench_document,
    finish_launches,
    launches_option,
    run_options,
    show_warnings,
    verdict,
)
from commbench.errors import ExitCode
from commbench.names import AUTO, BACKEND_CHOICES, DEVICE_CHOICES, BackendChoice, DeviceChoice
from commbench.perf import flags as perf_flags
from commbench.running.other_rank import OtherRank

if TYPE_CHECKING:
    from commbench.running.perf import PerfLaunch, PerfRunSet


class _NcclTestsCommand(click.Command):
    """Reads nccl-tests' flags as nccl-tests does (-b8 and -b 8 alike); a flag nccl-tests has and commbench perf
    lacks is accepted at its default and otherwise refused saying why; an unknown flag is named with the nccl-tests
    flag it resembles."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        kept: list[str] = []
        pending = list(args)
        while pending:
            arg = pending.pop(0)
            short = _unsupported_flag(arg)
            if short is None:
                kept.append(arg)
                continue
            name = perf_flags.UNSUPPORTED[short][0]
            if arg in (short, name):
                if not pending:
                    raise click.UsageError(f"{short}/{name} needs a value", ctx)
                value = pending.pop(0)
            else:
                value = arg.split("=", 1)[1] if arg.startswith(name) else arg[2:]
            perf_flags.refuse_unsupported(short, value)
        try:
            return super().parse_args(ctx, kept)
        except click.NoSuchOption as error:
            raise click.UsageError(perf_flags.resembling(error.option_name), ctx) from None


def _unsupported_flag(arg: str) -> str | None:
    """The nccl-tests flag commbench perf lacks that arg is (-t, -t4, --nthreads, --nthreads=4), or None."""
    return next((flag for flag, (name, _, _) in perf_flags.UNSUPPORTED.items()
                 if arg == flag or arg == name or arg.startswith((f"{name}=",)) or
                 (arg.startswith(flag) and len(arg) > 2 and not arg.startswith("--"))), None)


def _flag_options(function: CommandT) -> CommandT:
    for flag in reversed(perf_flags.FLAGS):
        default = f" [default: {flag.default}]" if flag.default is not None else ""
        function = click.option(flag.short, *flag.names, flag.key, type=click.STRING, default=None,
                                metavar=flag.metavar, help=f"{flag.meaning}{default}")(function)
    return function


@click.command(name="perf", cls=_NcclTestsCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("collective", metavar="COLLECTIVE")
@_flag_options
@click.option("--backend", type=click.Choice(BACKEND_CHOICES), default=AUTO, show_default=True,
              help="commbench: process-group backend; auto = nccl on GPUs, else gloo.")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default=AUTO, show_default=True,
              help="commbench: tensor device; auto = cuda when a GPU is visible.")
@click.option("--env-axis", "env_axes", multiple=True, metavar="NAME=V1,V2",
              help="commbench: an environment variable to vary, each combination its own launch (see sweep).")
@click.option("--nccl-algo", "nccl_algo", multiple=True, metavar="A,B", help="commbench: --env-axis NCCL_ALGO=A,B.")
@click.option("--nccl-proto", "nccl_proto", multiple=True, metavar="P,Q",
              help="commbench: --env-axis NCCL_PROTO=P,Q.")
@click.option("--tuner-plugin", metavar="PATH", help="commbench: NCCL_TUNER_PLUGIN for every launch.")
@click.option("--tuner-config", metavar="FILE", help="commbench: NCCL_TUNER_CONFIG_FILE for every launch.")
@launches_option
@run_options
def perf(collective: str, backend: BackendChoice, device: DeviceChoice, out: Path, run_id: str | None, quiet: bool,
         as_json: bool, launches: int, env_axes: tuple[str, ...], nccl_algo: tuple[str, ...],
         nccl_proto: tuple[str, ...], tuner_plugin: str | None, tuner_config: str | None, **values: Any) -> None:
    """Run nccl-tests' benchmark of COLLECTIVE with nccl-tests' flags, method and output.

    COLLECTIVE: all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or sendrecv, or nccl-tests'
    program name (all_reduce_perf, alltoall_perf, ...). Timed as nccl-tests times: -n calls back to back after a
    synchronising call and a barrier, divided by -n, combined over ranks as -a says; out of place and in place
    (N/A where torch.distributed has no such call). Prints nccl-tests' text, writes -J FILE as nccl-tests' JSON, and
    stores an ordinary run folder (report, fit and compare read it; `commbench import nccl-tests` reads the text
    back). Flags nccl-tests has and commbench lacks (-t, -p, -R, ...) are accepted at their default only.

    Exit codes: 0 every check passed, 1 wrong results, 2 bad input, 3 the run failed.
    """
    from commbench.running.perf import run_perf

    request = perf_flags.parse(collective, values)  # every flag checked before torch is loaded
    environment = {"env_axes": env_axes, "nccl_algo": nccl_algo, "nccl_proto": nccl_proto,
                   "tuner_plugin": tuner_plugin, "tuner_config": tuner_config}
    argv = ["commbench", *sys.argv[1:]]
    ran = run_perf(request, backend=backend, device=device, environment=environment, out=out, run_id=run_id,
                   quiet=quiet, launches=launches, argv=argv, accepted=show_warnings)
    if isinstance(ran, OtherRank):  # rank 0 reports for everyone
        sys.exit(ran.exit_code)
    sys.exit(finish_launches(ran.launches, _reporter(ran, quiet=quiet, as_json=as_json, argv=argv), quiet=quiet,
                             as_json=as_json, argv=argv))


def _reporter(ran: PerfRunSet, *, quiet: bool, as_json: bool,
              argv: list[str]) -> Callable[[PerfLaunch, bool], tuple[ExitCode, dict[str, object]]]:
    """report(launch, show) of one launch: nccl-tests' text when show (the run, or the last of a run set: -J then
    holds the last launch's), the verdict, and the launch's --json document."""
    bench, json_path = ran.bench, ran.json_path

    def report(launch: PerfLaunch, show: bool) -> tuple[ExitCode, dict[str, object]]:
        from commbench.running.perf import nccl_tests_texts

        outcome, run = launch.outcome, launch.run
        if show and not (quiet or as_json):
            header = [f"# Writing JSON output to {json_path}"] if json_path is not None else []
            click.echo("\n".join([*header, *nccl_tests_texts(bench, outcome.run_dir, run, _notes(ran))]))
        code = verdict(bench.kind, outcome, name="perf")
        return code, {"command": argv, **bench_document(bench, outcome, code),
                      "avg_bus_bandwidth_gbps": run.average_busbw_gbps, "json_file": json_path}

    return report


def _notes(ran: PerfRunSet) -> list[str]:
    """The notes under nccl-tests' text: the sweep's and the flags', the sweep's few-samples note said in -N terms
    (nccl-tests' method: one batch per size and cycle)."""
    from commbench.benches.collective import few_samples_note
    from commbench.measure.stats import MIN_SAMPLES_FOR_CI

    iters = ran.bench.spec.iters
    notes = [note for note in (*ran.bench.notes, *ran.request.notes) if note != few_samples_note(iters)]
    if iters < MIN_SAMPLES_FOR_CI:
        notes.append(f"{iters} batch(es) per size (-N {iters}): the run folder's rows have no 95 % CI; "
                     f"-N {MIN_SAMPLES_FOR_CI} or more gives one")
    return notes
