"""Stored runs, read back with their bench kind (meta.json names it; the registry knows its columns): what report,
compare and `slurm submit --wait` read. Nothing here touches torch.distributed."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench import store
from commbench.bench_kind import BenchKind
from commbench.benches import get_kind
from commbench.errors import CommbenchError

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class LoadedRun:
    name: str
    path: Path
    kind: BenchKind
    results: "pd.DataFrame"
    """The rows, a DataFrame."""
    meta: dict[str, Any]
    """meta.json as written (store.read_meta: JSON values, which each reader checks as it uses them)."""


def kind_of(run_dir: Path) -> BenchKind:
    name = store.kind_name(run_dir)
    if name == store.SUITE_KIND:
        raise CommbenchError(f"{run_dir} is a suite run; pass one of its bench folders "
                             f"({', '.join(store.suite_bench_dirs(run_dir) or {})}) or a command that takes suites")
    return get_kind(name)


def load_run(run_dir: Path, name: str | None = None, *, allow_empty: bool = False) -> LoadedRun:
    """A bench run folder with its rows; an empty one (a failed or unfinished run) is refused unless allowed."""
    run_dir = Path(run_dir)
    kind = kind_of(run_dir)
    results = store.read_results(run_dir, kind)
    if results.empty and not allow_empty:
        raise CommbenchError(f"{run_dir} has no result rows (an empty or failed run); pass a run that measured "
                             "something")
    return LoadedRun(name or run_dir.name, run_dir, kind, results, store.read_meta(run_dir))


def load_results_of(run_dir: Path, kind: BenchKind) -> "pd.DataFrame":
    """The rows of a run of this kind (the α–β fits read a collective sweep's); a run of another kind is refused in
    one line that names the command making the right one."""
    run = load_run(run_dir, allow_empty=True)
    if run.kind.name != kind.name:
        raise CommbenchError(f"{run_dir} holds a {run.kind.title}; pass the run folder of a {kind.title}")
    return run.results


def bench_dirs(run_dir: Path) -> dict[str, Path]:
    """The bench runs a folder holds: a suite run's benches by name, or the run itself under its folder name."""
    benches = store.suite_bench_dirs(run_dir)
    return benches if benches is not None else {Path(run_dir).name: Path(run_dir)}


@dataclass(frozen=True)
class Outcome:
    """How one bench ended, read from its run folder."""

    run_dir: Path
    status: str | None
    """meta.json's status; None when the file names none."""
    reason: str | None
    results: "pd.DataFrame | None"
    """Its rows, or None when it wrote none."""
    teardown: str | None = None
    """How ranks failed after the run had stored and checked everything (the run is still complete)."""
    n_wrong: int = 0
    n_unchecked: int = 0
    """Measured rows no check verified (BenchKind.unchecked): unknown, not 0 wrong."""


def read_outcome(kind: BenchKind, run_dir: Path) -> Outcome:
    meta = store.read_meta(run_dir)
    results = store.read_results(run_dir, kind) if (run_dir / store.RESULTS_FILE).exists() else None
    return Outcome(run_dir, meta.get("status"), meta.get("reason"), results, meta.get("teardown"),
                   kind.n_wrong(results), kind.n_unchecked(results))


