"""`commbench perf`'s work: nccl-tests' flags as a collective sweep, resolved for this machine and run (one launch, or
a run set), each launch's run folder read back as nccl-tests' results and (-J) written as nccl-tests' JSON; the
command prints nccl-tests' text of the last launch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.errors import CommbenchError
from commbench.running.launches import LaunchDone, Launches, launch_runs
from commbench.running.other_rank import OtherRank, other_rank

if TYPE_CHECKING:
    from commbench.bench_kind import Bench
    from commbench.machine import Machine
    from commbench.names import BackendChoice, DeviceChoice
    from commbench.perf.flags import PerfRequest
    from commbench.perf.results import PerfRun
    from commbench.runs import Outcome


@dataclass(frozen=True)
class PerfLaunch:
    """One launch: how the bench ended, and its rows as nccl-tests' results."""

    outcome: Outcome
    run: PerfRun


@dataclass(frozen=True)
class PerfRunSet:
    """The sweep the flags made, the request (nccl-tests' settings and notes), the -J file (None without -J, and on
    ranks that write nothing), and the launches."""

    bench: Bench
    request: PerfRequest
    json_path: Path | None
    launches: Launches[PerfLaunch]


def run_perf(request: PerfRequest, *, backend: BackendChoice, device: DeviceChoice,
             environment: Mapping[str, object], out: Path, run_id: str | None, quiet: bool, launches: int,
             argv: list[str], accepted: Callable[[], object]) -> PerfRunSet | OtherRank:
    """The parsed flags (perf.flags.parse, checked before torch is loaded) as a sweep on this machine and its
    launches; accepted() is called once the sweep resolves, before the first launch."""
    from commbench.execution import torch_host

    torch_host.start()
    import pandas  # noqa: F401 - the run folder's reader, imported here while the host imports torch

    machine = torch_host.machine()
    request, bench = _resolve(request, machine, backend=backend, device=device, environment=environment)
    if bench.environments and request.json_path:
        raise CommbenchError("-J with --env-axis/--nccl-algo/--nccl-proto: nccl-tests' JSON holds one environment; "
                             "run each combination with its own -J, or leave -J out (the run folder has them all)")
    json_path = _reserve_json(request.json_path) if request.json_path and _writes(machine) else None
    accepted()
    launch = _launcher(bench, machine, request, json_path, quiet=quiet, argv=argv)
    ran = launch_runs(launches, launch, out=out, run_id=run_id, quiet=quiet, in_job=machine.in_job)
    return ran if isinstance(ran, OtherRank) else PerfRunSet(bench, request, json_path, ran)


def _resolve(request: PerfRequest, machine: Machine, *, backend: BackendChoice, device: DeviceChoice,
             environment: Mapping[str, object]) -> tuple[PerfRequest, Bench]:
    """The request fitted to the target (types and ops its backend runs), and the sweep it equals."""
    from commbench.benches.collective import KIND
    from commbench.benches.options import parse_options
    from commbench.machine import resolve_target
    from commbench.perf import flags as perf_flags

    try:
        nproc = request.options["nproc"]
        target = resolve_target(machine, backend=backend, device=device, nproc=None if nproc is None else int(nproc))
        request = perf_flags.fit_to(request, backend=target.backend, device=target.device,
                                    nccl_version=machine.nccl_version, gpu_capability=machine.gpu_capability)
        options = parse_options(KIND.options, {**request.options, "backend": backend, "device": device,
                                               **environment})
        return request, KIND.resolve(replace(options, left_out=request.left_out), machine)
    except CommbenchError as error:  # the sweep's checks name sweep options: say them as the flags given
        raise CommbenchError(perf_flags.in_flags_terms(str(error))) from None


def _writes(machine: Machine) -> bool:
    return not machine.in_job or machine.rank == 0


def _reserve_json(path: str) -> Path:
    from commbench.perf import json_file

    return json_file.reserve(path)


def _launcher(bench: Bench, machine: Machine, request: PerfRequest, json_path: Path | None, *, quiet: bool,
              argv: list[str]) -> Callable[[Path, str | None], LaunchDone[PerfLaunch] | OtherRank]:
    """One launch: the sweep into a run folder, read back as nccl-tests' results, and (-J) written as its JSON (a
    run set's file then holds the last launch's)."""
    from commbench import runinfo
    from commbench.execution import session
    from commbench.perf import json_file
    from commbench.perf.results import read_perf_run

    def launch(folder: Path, launch_id: str | None) -> LaunchDone[PerfLaunch] | OtherRank:
        ok, outcome = session.run_bench(bench, machine, out=folder, run_id=launch_id, argv=argv, quiet=quiet,
                                        extra_meta={"nccl_tests": request.settings})
        if outcome is None:
            return other_rank(ok)
        run = read_perf_run(outcome.run_dir)
        if json_path is not None:
            json_file.write(json_path, run, argv=argv, env=runinfo.relevant_env())
        return LaunchDone(outcome.run_dir, bool(ok) and not outcome.n_wrong, PerfLaunch(outcome, run))

    return launch


def nccl_tests_texts(bench: Bench, run_dir: Path, run: PerfRun, notes: list[str]) -> list[str]:
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
