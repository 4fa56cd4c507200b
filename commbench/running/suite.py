"""`commbench run SUITE`'s work (and a bench command's bare suite): load the suite as this machine resolves it and
run its launches, each into one run folder holding every bench; the command prints the result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from commbench.errors import CommbenchError
from commbench.running.launches import LaunchDone, Launches, launch_runs
from commbench.running.other_rank import OtherRank, other_rank

if TYPE_CHECKING:
    from commbench.suite.load import Suite
    from commbench.suite.run import SuiteOutcome


@dataclass(frozen=True)
class SuiteRun:
    """The suite as loaded, and its launches (each launch's SuiteOutcome)."""

    suite: Suite
    launches: Launches[SuiteOutcome]


def run_suite_launches(suite_name: str | Path, *, overrides: Mapping[str, object], into: Path | None, out: Path,
                       run_id: str | None, quiet: bool, launches: int, argv: list[str],
                       accepted: Callable[[], object]) -> SuiteRun | OtherRank:
    """The suite's launches; accepted() is called once every bench is, before the first launch. into: an existing
    run folder to fill (a Slurm job's), one launch only."""
    if into is not None and launches > 1:
        raise CommbenchError(f"--launches {launches} with --into: a Slurm job fills its one run folder")
    from commbench.execution import torch_host
    from commbench.suite.load import load_suite
    from commbench.suite.run import run_suite

    torch_host.start()
    import pandas  # noqa: F401 - the tables' import, here on one core while the host imports torch on another

    machine = torch_host.machine()
    suite = load_suite(suite_name, machine, overrides=dict(overrides))
    accepted()

    def launch(folder: Path, launch_id: str | None) -> LaunchDone[SuiteOutcome] | OtherRank:
        outcome = run_suite(suite, machine, out=folder, run_id=launch_id, into=into, argv=argv, quiet=quiet)
        if outcome.run_dir is None:
            return _other_rank(outcome)
        return LaunchDone(outcome.run_dir, outcome.ok and not any(result.n_wrong for _, result in outcome.benches),
                          outcome)

    ran = launch_runs(launches, launch, out=out, run_id=run_id, quiet=quiet, in_job=machine.in_job)
    return ran if isinstance(ran, OtherRank) else SuiteRun(suite, ran)


def _other_rank(outcome: SuiteOutcome) -> OtherRank:
    from commbench.execution.session import Ran

    # on ranks other than 0, run_suite's ok is session's Ran itself (SuiteOutcome.ok says so): it carries .problems
    return other_rank(cast(Ran, outcome.ok))
