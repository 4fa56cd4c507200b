"""The end-of-sweep table of a training sweep, and the configuration it recommends (fastest that fits)."""

import math

import pandas as pd

from commbench.training.spec import SETTINGS, config_label

_COLUMNS = [  # (header, units, width, value of a row)
    ("step p50", "(ms)", 9, lambda r: _num(r["step_time_ms_p50"], 1)),
    ("step p95", "(ms)", 9, lambda r: _num(r["step_time_ms_p95"], 1)),
    ("samples/s", "(1/s)", 10, lambda r: _num(r["samples_per_s"], 1)),
    ("comm", "(ms)", 8, lambda r: _num(r["comm_ms"], 1)),
    ("exposed", "(ms)", 8, lambda r: _num(r["exposed_comm_ms"], 1)),
    ("no_sync Δ", "(ms)", 10, lambda r: _num(r["exposed_comm_ms_nosync"], 1)),
    ("overlap", "(%)", 8, lambda r: _num(r["overlap_pct"], 0)),
    ("peak mem", "(MiB)", 9, lambda r: _num(_mib(r["peak_mem_bytes"]), 0)),
    ("state", "(MiB)", 8, lambda r: _num(_mib(r["model_state_bytes"]), 2)),
    ("fits", "", 5, lambda r: {True: "yes", False: "NO"}.get(_bool(r["fits"]), "?")),
    ("#wrong", "", 7, lambda r: str(int(r["n_wrong"]))),
]


def _num(value, digits: int) -> str:
    return "-" if _missing(value) else f"{value:.{digits}f}"


def _mib(value):
    return None if _missing(value) else value / 2**20


def _bool(value):
    if isinstance(value, str):
        return {"True": True, "False": False}.get(value)
    return None if _missing(value) else bool(value)


def best_config(results: pd.DataFrame) -> pd.Series | None:
    """The highest throughput (samples/s, so that accumulation steps compare fairly) among configurations whose
    peak memory fits and whose check found nothing wrong."""
    eligible = results[(results["n_wrong"] == 0) & (results["fits"].map(_bool) != False)]  # noqa: E712 (None = unknown)
    if eligible.empty:
        return None
    return eligible.loc[eligible["samples_per_s"].idxmax()]


def short_labels(results: pd.DataFrame) -> list[str]:
    """Each configuration named by its strategy (and implementation) and the settings that differ in this sweep."""
    varying = [name for name in SETTINGS if results[name].astype(str).nunique() > 1]
    return [config_label(row["strategy"], row["impl"], {name: row[name] for name in varying if not _missing(row[name])})
            for _, row in results.iterrows()]


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_training_table(results: pd.DataFrame) -> str:
    labels = short_labels(results)
    width = max(13, *(len(label) for label in labels))
    head = f"{'configuration':<{width}} " + " ".join(f"{name:>{w}}" for name, _, w, _ in _COLUMNS)
    units = f"{'':<{width}} " + " ".join(f"{unit:>{w}}" for _, unit, w, _ in _COLUMNS)
    lines = [head, units]
    for label, (_, row) in zip(labels, results.iterrows()):
        lines.append(f"{label:<{width}} " + " ".join(f"{cell(row):>{w}}" for _, _, w, cell in _COLUMNS))
    first = results.iloc[0]
    lines.append(f"# {first['world_size']} ranks, {first['backend']} on {first['device']}; model "
                 f"{first['model_kind']} {first['params'] / 1e6:.2f}M parameters; step time = slowest rank; comm, "
                 "exposed and overlap from the profiler trace; no_sync Δ = step − step without gradient sync (DDP)")
    best = best_config(results)
    if best is None:
        lines.append("# best: none (no configuration fits in memory with a correct check)")
    else:
        label = labels[results.index.get_loc(best.name)]
        lines.append(f"# best: {label} — {best['samples_per_s']:.1f} samples/s, step "
                     f"{best['step_time_ms_p50']:.1f} ms, peak {_num(_mib(best['peak_mem_bytes']), 0)} MiB")
    return "\n".join(lines)


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    """The report's key numbers of a training run: the end table's columns, the recommended configuration marked."""
    table = pd.DataFrame({
        "configuration": short_labels(results), "step p50 (ms)": results["step_time_ms_p50"].round(1),
        "samples/s": results["samples_per_s"].round(1), "exposed comm, trace (ms)": results["exposed_comm_ms"].round(1),
        "no_sync Δ (ms)": results["exposed_comm_ms_nosync"].round(1), "overlap (%)": results["overlap_pct"],
        "peak mem (MiB)": (results["peak_mem_bytes"] / 2**20).round(0),
        "model state (MiB)": (results["model_state_bytes"] / 2**20).round(2),
        "predicted state (MiB)": (results["model_state_bytes_predicted"] / 2**20).round(2),
        "#wrong": results["n_wrong"]})
    best = best_config(results)
    table["best"] = ["◀ best" if best is not None and index == best.name else "" for index in results.index]
    return table
