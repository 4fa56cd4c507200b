"""A bench command's work (`commbench sweep`, `ddp`, `fsdp`, `zero`, ...): start the torch host, resolve the
options for this machine, run the bench's launches into run folders; the command prints the result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.running.launches import LaunchDone, Launches, launch_runs
from commbench.running.other_rank import OtherRank, other_rank

if TYPE_CHECKING:
    from commbench.bench_kind import Bench, BenchKind
    from commbench.machine import Machine
    from commbench.runs import Outcome


@dataclass(frozen=True)
class BenchRun:
    """The bench as resolved, and its launches (each launch's Outcome, read from its run folder)."""

    bench: Bench
    launches: Launches[Outcome]


def run_bench_command(kind: BenchKind, values: Mapping[str, object], *, out: Path, run_id: str | None, quiet: bool,
                      launches: int, argv: list[str], accepted: Callable[[], object]) -> BenchRun | OtherRank:
    """The bench of `kind` with the command line's values; accepted() is called once they are, before the first
    launch (the command says its warnings then)."""
    from commbench.benches.options import parse_options
    from commbench.execution import torch_host

    torch_host.start()
    import pandas  # noqa: F401 - the tables' import, here on one core while the host imports torch on another

    machine = torch_host.machine()
    bench = kind.resolve(parse_options(kind.options, dict(values)), machine)
    accepted()
    return run_resolved(bench, machine, out=out, run_id=run_id, quiet=quiet, launches=launches, argv=argv)


def run_resolved(bench: Bench, machine: Machine, *, out: Path, run_id: str | None, quiet: bool, launches: int,
                 argv: list[str], extra_meta: dict[str, object] | None = None) -> BenchRun | OtherRank:
    """A resolved bench's launches, each into a new run folder."""
    from commbench.execution import session

    def launch(folder: Path, launch_id: str | None) -> LaunchDone[Outcome] | OtherRank:
        ok, outcome = session.run_bench(bench, machine, out=folder, run_id=launch_id, argv=argv, quiet=quiet,
                                        extra_meta=extra_meta)
        if outcome is None:
            return other_rank(ok)
        return LaunchDone(outcome.run_dir, bool(ok) and not outcome.n_wrong, outcome)

    ran = launch_runs(launches, launch, out=out, run_id=run_id, quiet=quiet, in_job=machine.in_job)
    return ran if isinstance(ran, OtherRank) else BenchRun(bench, ran)
