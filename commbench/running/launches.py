"""A command's launches: the run (one launch), or a run set of N launches into one folder whose launch noise is
written to run_set.json and kept as a fact of the machine (gate/run_set.py, gate/noise_record.py). What each launch
runs is the command's; this module returns what ran and where, for the command to report."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from commbench.gate.run_set import Launched
from commbench.running.other_rank import OtherRank

if TYPE_CHECKING:
    pass

OutcomeT = TypeVar("OutcomeT")


@dataclass
class LaunchDone(Launched, Generic[OutcomeT]):
    """One launch that rank 0 (or the launcher) ran: its folder, whether the next launch may follow, and how it
    ended (a bench's Outcome, a suite's SuiteOutcome, ...)."""

    outcome: OutcomeT


@dataclass(frozen=True)
class RunSetWritten:
    """A run set's folder, the launch noise its run_set.json stores, and the one line that names them."""

    set_dir: Path
    launch_noise_pct: float | None
    summary: str


@dataclass(frozen=True)
class Launches(Generic[OutcomeT]):
    """The launches a command ran, in order (one without --launches); run_set: the run set they make, None for a
    single run."""

    done: list[LaunchDone[OutcomeT]]
    run_set: RunSetWritten | None

    @property
    def last(self) -> LaunchDone[OutcomeT]:
        return self.done[-1]


Launch = Callable[[Path, "str | None"], "LaunchDone[OutcomeT] | OtherRank"]
"""launch(folder, run id): one launch into folder/run id."""


def launch_runs(launches: int, launch: Launch[OutcomeT], *, out: Path, run_id: str | None, quiet: bool,
                in_job: bool) -> Launches[OutcomeT] | OtherRank:
    """The run (launches = 1), or a run set of `launches` launches (stopping after one that fails) with its
    run_set.json written and its launch noise kept for this machine."""
    if launches == 1:
        first = launch(out, run_id)
        return first if isinstance(first, OtherRank) else Launches([first], None)
    from commbench.gate import launch_values, noise_record, run_set

    def one(folder: Path, launch_id: str) -> LaunchDone[OutcomeT]:
        done = launch(folder, launch_id)
        assert not isinstance(done, OtherRank)  # launch_all refuses --launches N inside a job, where ranks are
        return done

    set_dir, done = run_set.launch_all(launches, one, out=out, run_id=run_id, quiet=quiet, in_job=in_job)
    noise = run_set.noise_document([launched.run_dir.name for launched in done], launch_values.launch_values(set_dir))
    run_set.write(set_dir, noise)
    kept = noise_record.record_run_set(set_dir, len(done))
    line = run_set.summary_line(set_dir, noise, planned=launches, kept_as=[key.label for key in kept])
    return Launches(done, RunSetWritten(set_dir, noise["launch_noise_pct"], line))
