"""The runs `commbench tune` reads: collective rows (a sweep's or an import's), each with the environment label it was
measured under and the topology NCCL would see (nodes from the hosts meta.json records, ranks from world_size)."""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from commbench import store
from commbench.benches.collective import KIND
from commbench.errors import CommbenchError
from commbench.runs import kind_of, load_run
from commbench.sweep.env_axes import DEFAULT_LABEL

ENV = "env"
RUN, NODES = "run", "nodes"
"""Columns tune adds to each row: the run folder it came from, and the node count of that run."""
UNKNOWN_NODES = -1
"""The nodes of a run that recorded no hosts (read only with --any-topology, where every line says -1)."""


@dataclass(frozen=True)
class TuneRun:
    path: Path
    run_id: str
    source: str
    """commbench for a sweep, the tool for an import."""
    world_sizes: tuple[int, ...]
    nodes: int | None
    """Distinct hosts the run recorded; None where it recorded none (an import of a table without rank lines)."""
    envs: tuple[str, ...]


@dataclass(frozen=True)
class Loaded:
    runs: tuple[TuneRun, ...]
    rows: pd.DataFrame


def load(paths: tuple[Path, ...], *, any_topology: bool) -> Loaded:
    """Every run's collective rows, with env ("" where the file has no env column or cell), run and nodes. Refuses,
    one line each: no runs, a folder given twice, a folder that is not a run, a run of another bench kind, a run
    that did not complete, a run without rows, a node count that is unknown (unless --any-topology), and runs that
    vary no environment."""
    if not paths:
        raise CommbenchError("no runs given; pass the run folders measured under each setting, e.g. commbench tune "
                             "results/algo-sweep")
    seen: set[Path] = set()
    runs, frames = [], []
    for path in paths:
        if Path(path).resolve() in seen:
            raise CommbenchError(f"{path} is given twice; pass each run once")
        seen.add(Path(path).resolve())
        run, rows = _read(Path(path), any_topology)
        runs.append(run)
        frames.append(rows)
    rows = pd.concat(frames, ignore_index=True)
    envs = sorted(set(rows[ENV]))
    if len(envs) < 2:
        only = envs[0] or "the default environment"
        raise CommbenchError(f"the runs measured one environment only ({only}): tune compares environment "
                             "combinations; sweep with --nccl-algo, --nccl-proto or --env-axis, or import each log "
                             "with the --env it was taken under")
    return Loaded(tuple(runs), rows)


def _read(path: Path, any_topology: bool) -> tuple[TuneRun, pd.DataFrame]:
    kind = kind_of(path)  # refuses what is not a run folder, and a suite run (naming its bench folders)
    if kind.name != KIND.name:  # before its rows are read: they would be refused as another kind's
        raise CommbenchError(f"{path} holds a {kind.title}, not collective rows; pass runs of commbench sweep or "
                             "perf, or of commbench import")
    _require_complete(path)
    run = load_run(path)  # refuses a run without rows
    rows = run.results.copy()
    rows[ENV] = env_labels(rows)
    hosts = run.meta.get("hosts")
    nodes = len(hosts) if isinstance(hosts, list) and hosts else None
    if nodes is None and not any_topology:
        raise CommbenchError(f"{path} records no hosts, so the nodes NCCL would see are unknown; pass --any-topology "
                             "(nNodes and nRanks -1 on every line)")
    rows[RUN], rows[NODES] = str(path), nodes if nodes is not None else UNKNOWN_NODES
    sources = rows["source"].dropna().astype(str) if "source" in rows else pd.Series(dtype=str)
    return TuneRun(path=path, run_id=str(run.meta.get("run_id") or path.name),
                   source=", ".join(sorted(set(sources))) or "commbench",
                   world_sizes=tuple(sorted(int(size) for size in rows["world_size"].unique())), nodes=nodes,
                   envs=tuple(dict.fromkeys(rows[ENV]))), rows


def _require_complete(path: Path) -> None:
    """A run that failed (or never finished) is refused: the combination that failed stored no rows, so a setting
    is missing from the comparison, and its failure was a crash, never a setting NCCL refused (those complete, with
    rows noted "not available")."""
    meta = store.read_meta(path)
    status = meta.get("status")
    if status == store.STATUS_COMPLETE:
        return
    why = f": {' '.join(str(meta['reason']).split())}" if meta.get("reason") else ""
    raise CommbenchError(f"{path} did not complete (status {status or 'not recorded'}{why}); tune compares complete "
                         "runs only: rerun the sweep, or pass a run of the combinations that did not fail")


def env_labels(rows: pd.DataFrame) -> pd.Series:
    """The rows' env labels as strings; "" for rows written before the column, and for empty cells (which pandas
    reads as NaN)."""
    if ENV not in rows.columns:
        return pd.Series(DEFAULT_LABEL, index=rows.index, dtype=object)
    column = rows[ENV].astype(object)
    return column.where(column.notna(), DEFAULT_LABEL).astype(str)
