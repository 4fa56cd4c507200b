"""Run sets: one bench or suite launched N times into one folder, and the launch noise measured over its launches.

A run set is OUT/RUN_ID/ holding launch1 ... launchN, each a complete run folder (what `--launches N` writes, and
what results/baselines/cpu-ci holds), and run_set.json: for every gated row and metric each launch's value and the
launch-to-launch spread of their logarithms, and that spread pooled over the rows: the run set's launch noise.
`commbench compare` reads it as the floor of a single launch compared with this run set (docs/gate.md); a run set
of three or more launches also keeps it as a fact of the machine (machine_noise.py).

Which rows a run holds, and their values, is launch_values.py's (launch_values.launch_values); this module takes them
as given.
"""

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from commbench import store
from commbench.errors import CommbenchError

RUN_SET_FILE = "run_set.json"
LAUNCH_PREFIX = "launch"


def launch_id(index: int) -> str:
    """The folder of the index-th launch (from 1) in a run set."""
    return f"{LAUNCH_PREFIX}{index}"


def spread_pct(log_sd: float) -> float:
    """A spread on the log scale in percent: the factor one standard deviation stands for, less 1."""
    return math.expm1(log_sd) * 100


def log_spread(pct: float) -> float:
    return math.log1p(pct / 100)


def pooled_log_sd(groups: list[list[float]]) -> tuple[float, int]:
    """(sd, degrees of freedom) of values around their own group's mean, pooled over the groups (each a row's
    log values, one per launch); (nan, 0) when no group has two values."""
    squares, df = 0.0, 0
    for values in groups:
        if len(values) >= 2:
            mean = statistics.fmean(values)
            squares += sum((value - mean) ** 2 for value in values)
            df += len(values) - 1
    return (math.sqrt(squares / df), df) if df else (math.nan, 0)


def log_values(values: list[float]) -> list[float]:
    """The natural logs of the values that have one (finite, above 0)."""
    return [math.log(value) for value in values if math.isfinite(value) and value > 0]


def noise_document(launches: list[str], values: dict[tuple[str, str], list[float]]) -> dict:
    """What run_set.json holds: per (row, metric) each launch's value and the spread of their logs; the spread
    pooled over the rows (the launch noise compare uses) and its median over rows."""
    rows: list[dict] = []
    for (row, metric), row_values in values.items():
        logs = log_values(row_values)
        log_sd = statistics.stdev(logs) if len(logs) >= 2 else None
        rows.append({"row": row, "metric": metric, "values": row_values, "log_sd": log_sd,
                     "spread_pct": None if log_sd is None else spread_pct(log_sd)})
    pooled, df = pooled_log_sd([log_values(row_values) for row_values in values.values()])
    spreads = [row["spread_pct"] for row in rows if row["spread_pct"] is not None]
    return {"launches": launches,
            "launch_noise_pct": spread_pct(pooled) if df else None, "log_sd": pooled if df else None, "df": df,
            "median_spread_pct": statistics.median(spreads) if spreads else None, "rows_measured": len(spreads),
            "about": "per row and gated metric, each launch's value; spread_pct: the sample standard deviation of "
                     "their natural logs, as a percent factor; launch_noise_pct: that spread pooled over the rows "
                     "(root mean square weighted by degrees of freedom)",
            "rows": rows}


def write(set_dir: Path, document: dict) -> Path:
    path = Path(set_dir) / RUN_SET_FILE
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


def stored_noise(path: Path) -> float | None:
    """The launch noise run_set.json stores for the run set at path, in percent; None without the file (a run set
    assembled by hand) or when it measured none (fewer than two launches)."""
    file = Path(path) / RUN_SET_FILE
    if not file.exists():
        return None
    try:
        document = json.loads(store.read_text(file))
    except json.JSONDecodeError as error:
        raise CommbenchError(f"{file} is not valid JSON ({error.msg}, line {error.lineno}); it was not written by "
                             "commbench or was damaged: delete it (compare then measures the run set's launches)"
                             ) from None
    noise = document.get("launch_noise_pct") if isinstance(document, dict) else "absent"
    if noise is not None and not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise >= 0):
        raise CommbenchError(f"{file}: launch_noise_pct is {noise!r}, not a percentage; the file was not written by "
                             "commbench or was edited: delete it (compare then measures the run set's launches)")
    return None if noise is None else float(noise)


@dataclass
class Launched:
    """One launch of a run set, as the command that ran it reports it."""

    run_dir: Path
    ok: bool
    """Complete, every check passed: the next launch may follow."""


LaunchedT = TypeVar("LaunchedT", bound=Launched)


def launch_all(launches: int, launch: Callable[[Path, str], LaunchedT], *, out: Path, run_id: str | None,
               quiet: bool, in_job: bool) -> tuple[Path, list[LaunchedT]]:
    """launch(folder, run id) `launches` times into one new run set folder, out/run_id (default id: UTC time +
    host), under a bar over the launches; stops after a launch that failed or found wrong results."""
    from commbench.progress import LaunchProgress  # rich: loaded by a run, not by `commbench --help`

    if in_job:
        raise CommbenchError(f"--launches {launches} inside torchrun or srun: this process is one rank of one launch, "
                             "the job's; launch the job once per launch (--out DIR --run-id launchK) and compare DIR")
    set_dir = store.create_run_dir(out, run_id)
    done: list[LaunchedT] = []
    with LaunchProgress(launches, enabled=not quiet) as bar:
        for index in range(1, launches + 1):
            done.append(launch(set_dir, launch_id(index)))
            bar.show(index)
            if not done[-1].ok:
                break
    return set_dir, done


def summary_line(set_dir: Path, document: dict, *, planned: int, kept_as: Sequence[str] = ()) -> str:
    """The run set, its launches and its launch noise, in one line; kept_as: the machine facts it was added to
    (machine_noise.Key.label)."""
    launches = document["launches"]
    stopped = f" (stopped after {len(launches)} of {planned})" if len(launches) < planned else ""
    if document["launch_noise_pct"] is None:
        noise = "no launch noise (it needs two launches)"
    else:
        rows = document["rows_measured"]
        noise = (f"launch noise {document['launch_noise_pct']:.1f} % (launch-to-launch spread pooled over {rows} "
                 f"row{'s' if rows != 1 else ''}; median row {document['median_spread_pct']:.1f} %)")
    where = f"; added to this machine's launch noise for {', '.join(kept_as)} (commbench env)" if kept_as else ""
    return f"run set {set_dir}: {len(launches)} launches{stopped}, {noise}; {Path(set_dir) / RUN_SET_FILE}{where}"
