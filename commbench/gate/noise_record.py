"""A run set's launch noise, kept as a fact of the machine that launched it (gate/machine_noise.py): per backend and
device its benches ran on, the launch-to-launch spread pooled over their rows."""

from pathlib import Path

from commbench.gate import launch_values, machine_noise, run_set, sides


def record_run_set(set_dir: Path, launches: int) -> list[machine_noise.Key]:
    """Keep the run set's launch noise per (host, backend, device, world size) of its benches, when it has
    MIN_LAUNCHES or more launches; the keys it was kept under."""
    if launches < machine_noise.MIN_LAUNCHES:
        return []
    values_by_key: dict[machine_noise.Key, list[list[float]]] = {}
    for name, folders in sides.bench_run_sets(set_dir).items():
        key = machine_noise.side_key(folders[0])
        if key is None:
            continue
        values = launch_values.bench_launch_values(set_dir, name, folders)
        values_by_key.setdefault(key, []).extend(run_set.log_values(row) for row in values.values())
    kept = []
    for key, groups in values_by_key.items():
        log_sd, df = run_set.pooled_log_sd(groups)
        if df:
            machine_noise.record(key, log_sd, df, run_set_dir=set_dir)
            kept.append(key)
    return kept
