"""`commbench perf COLLECTIVE [nccl-tests flags]`: nccl-tests' command line, method and text, on torch.distributed.

The flags become the equivalent `commbench sweep` options (commbench/perf/flags.py) and run as a sweep does (one
launch, every point checked, a run folder); the output is then nccl-tests' text of that run folder, and -J its JSON."""

import sys
from dataclasses import replace
from pathlib import Path

import click

from commbench.cli.shared import (
    bench_document,
    launches_option,
    other_rank_exit,
    run_launches,
    run_options,
    show_warnings,
    verdict,
)
from commbench.names import AUTO, BACKEND_CHOICES, DEVICE_CHOICES
from commbench.perf import flags as perf_flags


class _NcclTestsCommand(click.Command):
    """Reads nccl-tests' flags as nccl-tests does (-b8 and -b 8 alike); a flag nccl-tests has and commbench perf
    lacks is accepted at its default and otherwise refused saying why; an unknown flag is named with the nccl-tests
    flag it resembles."""

    def parse_args(self, ctx, args):
        kept, pending = [], list(args)
        while pending:
            arg = pending.pop(0)
            short = next((flag for flag, (name, _, _) in perf_flags.UNSUPPORTED.items()
                          if arg == flag or arg == name or arg.startswith((f"{name}=",)) or
                          (arg.startswith(flag) and len(arg) > 2 and not arg.startswith("--"))), None)
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


def _flag_options(function):
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
def perf(collective, backend, device, out, run_id, quiet, as_json, launches, env_axes, nccl_algo, nccl_proto,
         tuner_plugin, tuner_config, **values) -> None:
    """Run nccl-tests' benchmark of COLLECTIVE with nccl-tests' flags, method and output.

    COLLECTIVE: all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all or sendrecv, or nccl-tests'
    program name (all_reduce_perf, alltoall_perf, ...). Timed as nccl-tests times: -n calls back to back after a
    synchronising call and a barrier, divided by -n, combined over ranks as -a says; out of place and in place
    (N/A where torch.distributed has no such call). Prints nccl-tests' text, writes -J FILE as nccl-tests' JSON, and
    stores an ordinary run folder (report, fit and compare read it; `commbench import nccl-tests` reads the text
    back). Flags nccl-tests has and commbench lacks (-t, -p, -R, ...) are accepted at their default only.

    Exit codes: 0 every check passed, 1 wrong results, 2 bad input, 3 the run failed.
    """
    request = perf_flags.parse(collective, values)  # every flag checked before torch is loaded
    from commbench.execution import torch_host
    torch_host.start()
    import pandas  # noqa: F401 - the run folder's reader, imported here while the host imports torch

    from commbench.benches.collective import KIND
    from commbench.benches.options import parse_options
    from commbench.errors import CommbenchError
    from commbench.machine import resolve_target

    machine = torch_host.machine()
    try:
        target = resolve_target(machine, backend=backend, device=device,
                                nproc=None if request.options["nproc"] is None else int(request.options["nproc"]))
        request = perf_flags.fit_to(request, backend=target.backend, device=target.device,
                                    nccl_version=machine.nccl_version, gpu_capability=machine.gpu_capability)
        environment = {"env_axes": env_axes, "nccl_algo": nccl_algo, "nccl_proto": nccl_proto,
                       "tuner_plugin": tuner_plugin, "tuner_config": tuner_config}
        options = parse_options(KIND.options, {**request.options, "backend": backend, "device": device,
                                               **environment})
        bench = KIND.resolve(replace(options, left_out=request.left_out), machine)
    except CommbenchError as error:  # the sweep's checks name sweep options: say them as the flags given
        raise CommbenchError(perf_flags.in_flags_terms(str(error))) from None
    if bench.environments and request.json_path:
        raise CommbenchError("-J with --env-axis/--nccl-algo/--nccl-proto: nccl-tests' JSON holds one environment; "
                             "run each combination with its own -J, or leave -J out (the run folder has them all)")
    json_path = _reserve_json(request) if request.json_path and _writes(machine) else None
    _run(bench, machine, request, json_path, out=out, run_id=run_id, quiet=quiet, as_json=as_json, launches=launches)


def _writes(machine) -> bool:
    return not machine.in_job or machine.rank == 0


def _reserve_json(request):
    from commbench.perf import json_file

    return json_file.reserve(request.json_path)


def _run(bench, machine, request, json_path: Path | None, *, out: Path, run_id, quiet: bool, as_json: bool,
         launches: int) -> None:
    """The run (or each launch of a run set: -J then holds the last launch's), shown as nccl-tests shows it."""
    from commbench import runinfo
    from commbench.benches.collective import few_samples_note
    from commbench.execution import session
    from commbench.gate.run_set import Launched
    from commbench.measure.stats import MIN_SAMPLES_FOR_CI
    from commbench.perf import json_file
    from commbench.perf.results import read_perf_run

    show_warnings()
    argv = ["commbench", *sys.argv[1:]]

    def launch(folder: Path, launch_id: str | None) -> Launched:
        ok, outcome = session.run_bench(bench, machine, out=folder, run_id=launch_id, argv=argv, quiet=quiet,
                                        extra_meta={"nccl_tests": request.settings})
        if outcome is None:
            other_rank_exit(ok)
        run = read_perf_run(outcome.run_dir)
        if json_path is not None:
            json_file.write(json_path, run, argv=argv, env=runinfo.relevant_env())

        def report(show: bool):
            if show and not (quiet or as_json):
                notes = [note for note in (*bench.notes, *request.notes)
                         if note != few_samples_note(bench.spec.iters)]
                if bench.spec.iters < MIN_SAMPLES_FOR_CI:  # nccl-tests' method: one batch per size and cycle
                    notes.append(f"{bench.spec.iters} batch(es) per size (-N {bench.spec.iters}): the run folder's "
                                 f"rows have no 95 % CI; -N {MIN_SAMPLES_FOR_CI} or more gives one")
                header = [f"# Writing JSON output to {json_path}"] if json_path is not None else []
                click.echo("\n".join([*header, *_texts(bench, outcome.run_dir, run, notes)]))
            code = verdict(bench.kind, outcome, name="perf")
            return code, {"command": argv, **bench_document(bench, outcome, code),
                          "avg_bus_bandwidth_gbps": run.average_busbw_gbps, "json_file": json_path}

        return Launched(outcome.run_dir, bool(ok) and not outcome.n_wrong, report)

    run_launches(launches, launch, out=out, run_id=run_id, quiet=quiet, as_json=as_json, machine=machine, argv=argv)


def _texts(bench, run_dir: Path, run, notes: list[str]) -> list[str]:
    """nccl-tests' text of the run; with environment axes one per combination, as nccl-tests run under each would
    print it, and a line for each combination that was refused."""
    from commbench import store
    from commbench.perf.results import read_perf_run
    from commbench.perf.text import nccl_tests_text
    from commbench.sweep.env_axes import label_of

    if not bench.environments:
        return [nccl_tests_text(run, notes=notes)]
    refused = {entry["reason"]: entry for entry in store.read_meta(run_dir).get("unavailable") or []}
    texts = []
    for variables, _ in bench.environments:
        label = label_of(variables)
        reason = next((why for why, entry in refused.items() if entry["env"] == variables), None)
        body = f"# not available: {reason}" if reason else nccl_tests_text(read_perf_run(run_dir, env=label),
                                                                           notes=notes)
        texts.append(f"# env: {label}\n{body}")
    return texts
