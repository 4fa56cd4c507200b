"""Launch noise for the gate: the per-launch values of a run or run set that run_set.json's launch noise is measured
over (launch_values), and the launch noise a comparison with a single launch takes as its floor (launch_floor)."""

from pathlib import Path

from commbench.bench_kind import BenchKind, Metric
from commbench.gate import machine_noise, priors, run_set, sides
from commbench.gate.joined_rows import rows_by_key
from commbench.gate.launch_tests import Floor


def launch_floor(baseline_dir: Path, new_dir: Path, launch_noise_pct: float | None = None) -> Floor:
    """The launch noise of this comparison's floor, in this order: the one given (--launch-noise); that of a side
    that is a run set (its run_set.json, or measured over its launches when it has none); the one stored for the
    machine that recorded the new side (machine_noise); the prior for the new side's device type."""
    if launch_noise_pct is not None:
        return Floor(launch_noise_pct, "--launch-noise")
    for side, path in (("baseline", baseline_dir), ("new side", new_dir)):
        found = _run_set_floor(side, path)
        if found is not None:
            return found
    key = machine_noise.side_key(new_dir)
    machine = machine_noise.stored(key) if key is not None else None
    if machine is not None:
        return Floor(machine.noise_pct, machine.source)
    assumed = priors.prior(key.device, key.backend, key.world) if key is not None else priors.prior(None)
    where = f" ({key.label} on {key.host}: no launch noise stored for it here)" if key is not None else ""
    return Floor(assumed.noise_pct, assumed.source + where)


def _run_set_floor(side: str, path: Path) -> Floor | None:
    """A side's launch noise where it is a run set: its run_set.json's, else measured over its launches."""
    folders = sides.run_folders(path)
    if len(folders) < 2:
        return None
    stored = run_set.stored_noise(path)
    if stored is not None:
        return Floor(stored, f"the {side}'s {Path(path) / run_set.RUN_SET_FILE}")
    measured = run_set.noise_document([folder.name for folder in folders], launch_values(path))["launch_noise_pct"]
    if measured is not None:
        return Floor(measured, f"measured over the {side}'s {len(folders)} launches ({path})")
    return None


def _gated_metrics(kind: BenchKind) -> list[Metric]:
    """The metrics whose launch noise a run set records: timed (they have samples) and gated by default."""
    return [metric for metric in kind.metrics if metric.samples and metric.default_threshold_pct is not None]


def launch_values(path: Path) -> dict[tuple[str, str], list[float]]:
    """Per row (labelled `[bench] row` in a suite) and metric run_set.json records, the value of each launch of a
    run or run set at path."""
    found = {}
    for name, folders in sides.bench_run_sets(path).items():
        found.update(bench_launch_values(path, name, folders))
    return found


def bench_launch_values(path: Path, name: str, folders: list[Path]) -> dict[tuple[str, str], list[float]]:
    """launch_values() of one bench: its folder in each launch (sides.bench_run_sets)."""
    run = sides.load_run(path, folders, allow_empty=True)
    prefix = f"[{name}] " if name else ""
    return {(prefix + run.kind.row_label(row), metric.name): values[metric.column]
            for row, values in rows_by_key(run, run.kind.identity).values() for metric in _gated_metrics(run.kind)}
