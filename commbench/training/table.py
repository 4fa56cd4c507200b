"""The end-of-sweep table of a training sweep, and the configuration it recommends (fastest that fits), with the
configurations it cannot tell apart from it within the step time's noise."""

import math

import pandas as pd

from commbench.measure.stats import as_number
from commbench.training.exposed import table_notes as exposed_notes
from commbench.training.spec import SETTINGS, config_label

_COLUMNS = [  # (header, units, width, value of a row)
    ("precision", "", 9, lambda r: row_precision(r)),
    ("step p50", "(ms)", 9, lambda r: _num(r["step_time_ms_p50"], 1)),
    ("p50 95% CI", "(ms)", 15, lambda r: step_ci_text(r)),
    ("step p95", "(ms)", 9, lambda r: _num(r["step_time_ms_p95"], 1)),
    ("samples/s", "(all ranks)", 11, lambda r: _num(r["samples_per_s"], 1)),
    ("tokens/s", "(per rank)", 10, lambda r: _num(r.get("tokens_per_s_per_rank"), 0)),
    ("MFU", "(%)", 6, lambda r: _num(r.get("mfu_pct"), 1)),
    ("comm", "(ms)", 8, lambda r: _num(r["comm_ms"], 1)),
    ("exposed", "(ms)", 8, lambda r: _num(r["exposed_comm_ms"], 1)),
    ("no_sync Δ", "(ms)", 10, lambda r: _num(r["exposed_comm_ms_nosync"], 1)),
    ("vs compute", "(ms)", 11, lambda r: _num(r.get("exposed_comm_ms_baseline"), 1)),
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


def _eligible(results: pd.DataFrame) -> pd.DataFrame:
    return results[(results["n_wrong"] == 0) & (results["fits"].map(_bool) != False)]  # noqa: E712 (None = unknown)


def best_config(results: pd.DataFrame) -> pd.Series | None:
    """The highest throughput (samples/s, so that accumulation steps compare fairly) among configurations whose
    peak memory fits and whose check found nothing wrong."""
    eligible = _eligible(results)
    if eligible.empty:
        return None
    return eligible.loc[eligible["samples_per_s"].idxmax()]


def throughput_ci(row) -> tuple[float, float] | None:
    """The samples/s that the ends of the median step time's 95 % CI give (samples/s = samples per step / step
    time); None without a CI. Between configurations with the same samples per step, two of these overlap exactly
    when their step-time CIs do; with different accumulation steps they compare the time per sample."""
    p50, low, high = (as_number(row.get(name)) for name in ("step_time_ms_p50", "step_time_ms_ci_lo",
                                                        "step_time_ms_ci_hi"))
    rate = as_number(row.get("samples_per_s"))
    if any(math.isnan(value) for value in (p50, low, high, rate)) or low <= 0:
        return None
    return rate * p50 / high, rate * p50 / low


def tied_configs(results: pd.DataFrame, best: pd.Series | None) -> tuple[list, list]:
    """(ties, unknown): the index of every other configuration that fits and is correct and whose step-time CI
    overlaps the best one's (the measurement cannot rank them), and of those where a CI is missing, so nobody can
    say."""
    if best is None:
        return [], []
    ties, unknown = [], []
    best_range = throughput_ci(best)
    for index, row in _eligible(results).iterrows():
        if index == best.name:
            continue
        other = throughput_ci(row)
        if best_range is None or other is None:
            unknown.append(index)
        elif other[0] <= best_range[1] and best_range[0] <= other[1]:
            ties.append(index)
    return ties, unknown


def step_ci_text(row) -> str:
    low, high = as_number(row.get("step_time_ms_ci_lo")), as_number(row.get("step_time_ms_ci_hi"))
    return "n/a" if math.isnan(low) or math.isnan(high) else f"{low:.1f}–{high:.1f}"


def short_labels(results: pd.DataFrame) -> list[str]:
    """Each configuration named by its strategy (and implementation) and the settings that differ in this sweep."""
    varying = [name for name in SETTINGS if results[name].astype(str).nunique() > 1]
    return [config_label(row["strategy"], row["impl"], {name: row[name] for name in varying if not _missing(row[name])})
            for _, row in results.iterrows()]


def _column(results: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all missing in a run written before it existed."""
    return pd.to_numeric(results[name], errors="coerce") if name in results else pd.Series(math.nan, results.index)


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
                 f"{first['model_kind']} {first['params'] / 1e6:.2f}M parameters{precision_text(results)}; "
                 "step time = slowest rank; comm, "
                 "exposed and overlap from the profiler trace; no_sync Δ = step − step without gradient sync (DDP): "
                 "the communication the step waits for; below 0 the step without sync was the slower one, i.e. "
                 "noise larger than the exposed communication; "
                 "p50 95% CI = distribution-free 95 % CI of the median step time (n/a: fewer than 6 steps)")
    lines += footnotes(results)
    lines += [f"# {note}" for note in exposed_notes(results)]
    lines.append(_best_line(results, labels))
    return "\n".join(lines)


PEAK_MEMORY_MEANING = {
    "cpu": "peak mem = the largest rank's peak resident set (Linux VmHWM) during the timed steps: the whole process, "
           "most of it torch itself (a few hundred MiB before any model), so it dwarfs the model state beside it",
    "cuda": "peak mem = the largest rank's peak allocated by torch's CUDA allocator during the timed steps "
            "(peak_mem_reserved_bytes: reserved; gpu_mem_used_peak_bytes: NVML's device-wide figure)",
}


def footnotes(results: pd.DataFrame) -> list[str]:
    """What the rates and the peak memory are: which rate is global and which per rank, how MFU is counted (or why
    it is absent), and what "peak mem" measures on each device type in the table."""
    lines = ["# rates: samples/s = all ranks together (global batch / step time); tokens/s per rank = global tokens/s "
             "÷ ranks; MFU = model FLOPs per token (6 × non-embedding parameters + 12 × layers × hidden × seq_len, "
             "forward + backward) × tokens/s per rank ÷ the GPU's dense peak at the precision"]
    notes = sorted({str(note) for note in results.get("mfu_note", pd.Series(dtype=object)) if not _missing(note)})
    if "mfu_pct" not in results or results["mfu_pct"].isna().all():
        lines[0] += f"; MFU absent: {'; '.join(notes)}" if notes else "; MFU absent: not recorded in this run"
    else:
        lines[0] += f"; peak used: {'; '.join(notes)}"
    for device in sorted({str(value) for value in results["device"]}):
        if device in PEAK_MEMORY_MEANING:
            lines.append(f"# {PEAK_MEMORY_MEANING[device]}")
    return lines


def row_precision(row) -> str:
    """A configuration's --mixed-precision, on every row (bf16 and fp32 steps are not one comparison): fp32 where
    the row does not record it, as configurations without the setting run (training/precision.py)."""
    value = row.get("mixed_precision")
    return "fp32" if _missing(value) else str(value)


def precision_text(results: pd.DataFrame) -> str:
    """What the footer says of the precision (which the labels name only where it varies): ", precision bf16 (...)";
    nothing for rows that do not record it."""
    present = [value for value in results["mixed_precision"] if not _missing(value)] \
        if "mixed_precision" in results else []
    if not present:
        return ""
    values = sorted(set(present), key=str)
    text = f", precision {'/'.join(values)}"
    if "bf16" in values:
        text += " (bf16: autocast for DDP/ZeRO-1, FSDP's bf16 parameters and fp32 gradient reduction)"
    if "tf32" in values:
        text += " (tf32: fp32 with TensorFloat-32 matmuls)"
    return text


def _best_line(results: pd.DataFrame, labels: list[str]) -> str:
    best = best_config(results)
    if best is None:
        return "# best: none (no configuration fits in memory with a correct check)"
    ties, unknown = tied_configs(results, best)
    named = {index: label for index, label in zip(results.index, labels)}
    line = (f"# best: {named[best.name]} — {best['samples_per_s']:.1f} samples/s, step "
            f"{best['step_time_ms_p50']:.1f} ms (95 % CI {step_ci_text(best)}), "
            f"peak {_num(_mib(best['peak_mem_bytes']), 0)} MiB")
    if ties:
        line += (f"; tie within noise: {', '.join(named[index] for index in [best.name, *ties])} (95 % CIs of the "
                 "step time overlap, per sample where accumulation steps differ): more --steps or a rerun decides")
    if unknown:
        line += f"; no 95 % CI to compare with: {', '.join(named[index] for index in unknown)}"
    return line


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    """The report's key numbers of a training run: the end table's columns, the recommended configuration marked."""
    table = pd.DataFrame({
        "configuration": short_labels(results),
        "precision": [row_precision(row) for _, row in results.iterrows()],
        "step p50 (ms)": results["step_time_ms_p50"].round(1),
        "step p50 95% CI (ms)": [step_ci_text(row) for _, row in results.iterrows()],
        "samples/s (all ranks)": results["samples_per_s"].round(1),
        "tokens/s per rank": _column(results, "tokens_per_s_per_rank").round(0),
        "MFU (%)": _column(results, "mfu_pct").round(1),
        "exposed comm, trace (ms)": results["exposed_comm_ms"].round(1),
        "exposed comm, trace max rank (ms)": _column(results, "exposed_comm_ms_max").round(1),
        "exposed comm vs compute-only (ms)": _column(results, "exposed_comm_ms_baseline").round(1),
        "no_sync Δ (ms)": results["exposed_comm_ms_nosync"].round(1), "overlap (%)": results["overlap_pct"],
        "peak mem (MiB)": (results["peak_mem_bytes"] / 2**20).round(0),
        "model state (MiB)": (results["model_state_bytes"] / 2**20).round(2),
        "predicted state (MiB)": (results["model_state_bytes_predicted"] / 2**20).round(2),
        "#wrong": results["n_wrong"]})
    best = best_config(results)
    ties, _ = tied_configs(results, best)
    table["best"] = ["◀ best" if best is not None and index == best.name else "◀ tie" if index in ties else ""
                     for index in results.index]
    return table
