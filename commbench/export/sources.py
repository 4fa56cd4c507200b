"""The runs an export reads: each RUN argument is a bench run folder or a suite run (whose bench folders are read),
with its kind, rows and meta.json. What cannot be exported is refused in one line before anything is written: a
folder that is not a run, a run given twice, two runs with one run_id (their series would collide), a run of a kind
without metrics, and a set of runs that holds nothing to export."""

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from commbench import store
from commbench.bench_kind import BenchKind
from commbench.benches import get_kind
from commbench.errors import CommbenchError, CommbenchWarning

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ExportedRun:
    path: Path
    run_id: str
    kind: BenchKind
    rows: "pd.DataFrame"
    meta: dict
    """The bench's meta.json, with the suite's slurm_job_id and hosts where a bench of a suite lacks them."""


def find(paths: tuple[Path, ...], exportable: dict[str, str]) -> list[ExportedRun]:
    """exportable: the kinds that have metrics → what to call them in a refusal ("collective sweeps and imports")."""
    seen: set[Path] = set()
    found: list[ExportedRun] = []
    for path in map(Path, paths):
        if path.resolve() in seen:
            raise CommbenchError(f"{path} is given twice; pass each run once")
        seen.add(path.resolve())
        benches = store.suite_bench_dirs(path)
        if benches is None:
            kind = get_kind(store.kind_name(path))  # refuses a folder that is not a run, naming the file it lacks
            if kind.name not in exportable:
                raise CommbenchError(f"{path} holds a {kind.title}, which has no Prometheus metrics; export "
                                     f"{_listed(exportable)}")
            found += _read(path, kind, {})
            continue
        suite_meta = store.read_meta(path)
        for name, bench_dir in benches.items():
            kind = get_kind(store.kind_name(bench_dir))
            if kind.name not in exportable:
                warnings.warn(f"{path}: bench {name} holds a {kind.title}, which has no Prometheus metrics; "
                              "left out", CommbenchWarning, stacklevel=2)
                continue
            found += _read(bench_dir, kind, suite_meta)
    _refuse_shared_run_ids(found)
    if not any(len(run.rows) for run in found):
        raise CommbenchError(f"{', '.join(map(str, paths))}: no result rows to export (no bench of a kind with "
                             "metrics, or runs that failed before measuring); pass runs that measured "
                             f"{_listed(exportable)}")
    return found


def _read(run_dir: Path, kind: BenchKind, suite_meta: dict) -> list[ExportedRun]:
    meta = store.read_meta(run_dir)
    for inherited in ("slurm_job_id", "hosts"):  # a bench of a suite that ran before its ranks reported them
        if not meta.get(inherited) and suite_meta.get(inherited):
            meta[inherited] = suite_meta[inherited]
    if not (run_dir / store.RESULTS_FILE).exists():
        warnings.warn(f"{run_dir} has no {store.RESULTS_FILE} (status {meta.get('status')}: "
                      f"{meta.get('reason') or 'no reason recorded'}); it adds no samples", CommbenchWarning,
                      stacklevel=3)
        return []
    rows = store.read_results(run_dir, kind)
    return [ExportedRun(run_dir, store.run_id_of(run_dir), kind, rows, meta)]


def _refuse_shared_run_ids(found: list[ExportedRun]) -> None:
    first: dict[str, Path] = {}
    for run in found:
        if run.run_id in first:
            raise CommbenchError(f"{first[run.run_id]} and {run.path} both have run_id {run.run_id!r}, so their "
                                 "series would be one; export them into separate files")
        first[run.run_id] = run.path


def _listed(exportable: dict[str, str]) -> str:
    names = list(dict.fromkeys(exportable.values()))
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
