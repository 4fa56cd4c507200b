"""The end-of-sweep table of a training sweep: a row per configuration with one exposed-communication figure (the
paired cost against the compute-only step; --verbose adds the trace's and DDP's no_sync figures), the configuration it
recommends (fastest that fits) and a ranking that says what the step time's noise lets it say
(training/ranking.py)."""

import math
import textwrap
from collections.abc import Callable, Hashable, Mapping

import pandas as pd

from commbench.measure.stats import as_number
from commbench.schema import common
from commbench.schema import training as col
from commbench.schema.column import is_empty
from commbench.training.bucket_caps import DDP_DEFAULT_CAP_MB, DDP_DEFAULT_FIRST_MB, bucket_label
from commbench.training.exposed import table_notes as exposed_notes
from commbench.training.ranking import (  # best_config, tied_configs: the report and tests use them here
    best_config,
    cell_bool,
    ranking_lines,
    throughput_ci,
    tied_configs,
)
from commbench.training.spec import SETTINGS, config_label, setting_text

Shown = Callable[[pd.DataFrame, bool], bool]
"""Whether the table shows a column: f(results, verbose)."""


def _always(results: pd.DataFrame, verbose: bool) -> bool:
    return True


def _verbose(results: pd.DataFrame, verbose: bool) -> bool:
    return verbose


def _where_any(name: str) -> Shown:
    """Shown where some row has a value (the buckets of DDP-based rows), short or verbose alike."""
    return lambda results, verbose: bool(_column(results, name).notna().any())


def _verbose_or_any(name: str) -> Shown:
    """Shown with --verbose, and in the short table where some row has a value (MFU: none on CPU, a footnote says
    why)."""
    return lambda results, verbose: verbose or bool(_column(results, name).notna().any())


_FITS_TEXT: dict[bool | None, str] = {True: "yes", False: "NO"}
"""The fits column as the table shows it ("?" where the row does not say)."""
# (header, units, value of a row, whether the table shows it: f(results, verbose))
_COLUMNS: list[tuple[str, str, Callable[[pd.Series], str], Shown]] = [
    ("precision", "", lambda r: row_precision(r), _always),
    ("step p50", "(ms)", lambda r: _num(r[col.STEP_TIME_MS_P50], 1), _always),
    ("p50 95% CI", "(ms)", lambda r: step_ci_text(r), _always),
    ("step p95", "(ms)", lambda r: _num(r[col.STEP_TIME_MS_P95], 1), _verbose),
    ("samples/s", "(all ranks)", lambda r: _num(r[col.SAMPLES_PER_S], 1), _always),
    ("tokens/s", "(per rank)", lambda r: _num(r.get(col.TOKENS_PER_S_PER_RANK), 0), _always),
    ("MFU", "(%)", lambda r: _num(r.get(col.MFU_PCT), 1), _verbose_or_any(col.MFU_PCT)),  # absent on CPU: a footnote
    ("comm", "(ms)", lambda r: _num(r[col.COMM_MS], 1), _always),
    # the one exposed figure of the short table: the paired cost against the compute-only step (docs/training.md)
    ("exposed", "(ms)", lambda r: _num(r.get(col.EXPOSED_COMM_MS_BASELINE), 1), _always),
    ("trace exp", "(ms)", lambda r: _num(r[col.EXPOSED_COMM_MS], 1), _verbose),
    ("trace max", "(ms)", lambda r: _num(r.get(col.EXPOSED_COMM_MS_MAX), 1), _verbose),
    ("no_sync Δ", "(ms)", lambda r: _num(r[col.EXPOSED_COMM_MS_NOSYNC], 1), _verbose),
    ("overlap", "(%)", lambda r: _num(r[col.OVERLAP_PCT], 0), _always),
    ("buckets", "(count)", lambda r: _num(r.get("bucket_count"), 0), _where_any("bucket_count")),
    ("peak mem", "(MiB)", lambda r: _num(_mib(r[col.PEAK_MEM_BYTES]), 0), _always),
    ("state", "(MiB)", lambda r: _num(_mib(r[col.MODEL_STATE_BYTES]), 2), _always),
    ("fits", "", lambda r: _FITS_TEXT.get(cell_bool(r["fits"]), "?"), _always),
    ("#wrong", "", lambda r: str(int(r[common.N_WRONG])), _always),
]
WRAP = 150
"""The ranking's lines wrap here: the table itself stays about this wide."""


def _num(value: object, digits: int) -> str:
    number = as_number(value)
    return "-" if math.isnan(number) else f"{number:.{digits}f}"


def _mib(value: float | None) -> float | None:
    return None if value is None or is_empty(value) else value / 2**20


def step_ci_text(row: pd.Series) -> str:
    low, high = as_number(row.get(col.STEP_TIME_MS_CI_LO)), as_number(row.get(col.STEP_TIME_MS_CI_HI))
    return "n/a" if math.isnan(low) or math.isnan(high) else f"{low:.1f}–{high:.1f}"


_BUCKET_SETTINGS = ("bucket_cap_mb", "first_bucket_mb")


_IMPLIED_RESHARD = {("zero3", "true"), ("zero2", "false")}
"""An FSDP configuration's strategy already says whether it reshards after forward (plan.py: zero3 = true, zero2 =
false): its label says it once."""


def short_labels(results: pd.DataFrame) -> list[str]:
    """Each configuration named by its strategy and the settings that differ in this sweep: its implementation only
    where rows differ in it (the footer names a shared one), reshard only where the strategy does not imply it, and a
    DDP bucket setting by what it is (training/bucket_caps.py: "default (1 MiB first, then 25 MiB)",
    "cap 1/16 grads = 1.3 MiB") right after the strategy."""
    varying = [name for name in SETTINGS if name in results and results[name].astype(str).nunique() > 1]
    one_impl = shared_impl(results) is not None
    labels = []
    for _, row in results.iterrows():
        settings = {name: row[name] for name in varying if not is_empty(row[name])}
        if (row["strategy"], setting_text(settings.get("reshard_after_forward"))) in _IMPLIED_RESHARD:
            del settings["reshard_after_forward"]
        label = config_label(row["strategy"], row["strategy"] if one_impl else row["impl"],
                             {name: value for name, value in settings.items() if name not in _BUCKET_SETTINGS})
        if any(name in settings for name in _BUCKET_SETTINGS) and not is_empty(row.get("bucket_cap_mb")):
            first = row.get("first_bucket_mb")
            first_mb = None if first is None or is_empty(first) else float(first)
            strategy, _, rest = label.partition(" ")
            label = " ".join(part for part in (strategy, bucket_label(float(row["bucket_cap_mb"]), first_mb,
                                                                      row.get("params")), rest) if part)
        labels.append(label)
    return labels


def shared_impl(results: pd.DataFrame) -> str | None:
    """The implementation every row shares where some row's strategy is not its implementation's name (zero3 on
    fsdp2), which the labels then leave to the footer; None where rows differ or each strategy names its own."""
    impls = set(results["impl"].astype(str))
    if len(impls) != 1 or (results["strategy"].astype(str) == results["impl"].astype(str)).all():
        return None
    return next(iter(impls))


def _column(results: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all missing in a run written before it existed."""
    return pd.to_numeric(results[name], errors="coerce") if name in results else pd.Series(math.nan, results.index)


def format_training_table(results: pd.DataFrame, verbose: bool = False) -> str:
    """The rows with the short table's columns (--verbose: every exposed figure, p95 and MFU too), then the footer,
    the footnotes, the best configuration and the ranking."""
    labels = short_labels(results)
    columns = [(name, unit, cell) for name, unit, cell, shown in _COLUMNS if shown(results, verbose)]
    cells = [[cell(row) for _, _, cell in columns] for _, row in results.iterrows()]
    widths = [max(len(name), len(unit), *(len(line[i]) for line in cells)) for i, (name, unit, _) in enumerate(columns)]
    width = max(13, *(len(label) for label in labels))
    lines = [f"{'configuration':<{width}} " + " ".join(f"{name:>{w}}" for (name, _, _), w in zip(columns, widths)),
             f"{'':<{width}} " + " ".join(f"{unit:>{w}}" for (_, unit, _), w in zip(columns, widths))]
    lines += [f"{label:<{width}} " + " ".join(f"{text:>{w}}" for text, w in zip(line, widths))
              for label, line in zip(labels, cells)]
    first = results.iloc[0]
    impl = shared_impl(results)
    lines.append(f"# {first[common.WORLD_SIZE]} ranks, {first['backend']} on {first['device']}"
                 f"{f', every configuration on {impl}' if impl else ''}; model "
                 f"{first['model_kind']} {first['params'] / 1e6:.2f}M parameters{precision_text(results)}; "
                 "step time = slowest rank; comm and overlap from the profiler trace (median over ranks); "
                 "p50 95% CI = distribution-free 95 % CI of the median step time (n/a: fewer than 6 steps)")
    if any(name == "buckets" for name, _, _ in columns):
        caps_named = any(f" {word} " in f"{label} " for label in labels for word in ("default", "cap"))
        lines.append("# buckets = DDP's buckets after its rebuild at step 2 (its own logging)" + (
            f"; default = DDP's own, no bucket argument: a {DDP_DEFAULT_FIRST_MB:g} MiB first bucket, then "
            f"{DDP_DEFAULT_CAP_MB:g} MiB; cap = --bucket-cap-mb for every bucket, 1/16, 1/4 and all grads being the "
            "default sweep's fractions of the model's gradient bytes (many buckets, a few, one)" if caps_named else ""))
    lines += footnotes(results)
    lines += [f"# {note}" for note in exposed_notes(results, verbose=verbose)]
    named = dict(zip(results.index, labels))
    lines.append(_best_line(results, named))
    for line in ranking_lines(results, named):
        lines += _wrapped(line)
    return "\n".join(lines)


def _wrapped(line: str) -> list[str]:
    """A ranking line as comment lines of at most WRAP characters, broken between its "; " clauses where it can (a
    label is not split), inside a clause only where one alone is wider."""
    indent = "#       "
    first, *rest = line.split("; ")
    lines = [f"# {first}"]
    for clause in rest:
        if len(lines[-1]) + 2 + len(clause) <= WRAP:
            lines[-1] += f"; {clause}"
        else:
            lines[-1] += ";"
            lines.append(f"{indent}{clause.strip()}")
    return [piece for text in lines for piece in (textwrap.wrap(text, WRAP, subsequent_indent=indent,
                                                                break_on_hyphens=False) if len(text) > WRAP
                                                  else [text])]


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
    notes = sorted({str(note) for note in results.get("mfu_note", pd.Series(dtype=object)) if not is_empty(note)})
    if col.MFU_PCT not in results or results[col.MFU_PCT].isna().all():
        lines[0] += f"; MFU absent: {'; '.join(notes)}" if notes else "; MFU absent: not recorded in this run"
    else:
        lines[0] += f"; peak used: {'; '.join(notes)}"
    for device in sorted({str(value) for value in results["device"]}):
        if device in PEAK_MEMORY_MEANING:
            lines.append(f"# {PEAK_MEMORY_MEANING[device]}")
    return lines


def row_precision(row: pd.Series) -> str:
    """A configuration's --mixed-precision, on every row (bf16 and fp32 steps are not one comparison): fp32 where
    the row does not record it, as configurations without the setting run (training/precision.py)."""
    value = row.get("mixed_precision")
    return "fp32" if is_empty(value) else str(value)


def precision_text(results: pd.DataFrame) -> str:
    """What the footer says of the precision (which the labels name only where it varies): ", precision bf16 (...)";
    nothing for rows that do not record it."""
    present = [value for value in results["mixed_precision"] if not is_empty(value)] \
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


def _best_line(results: pd.DataFrame, named: Mapping[Hashable, str]) -> str:
    """The recommendation, saying at once whether the noise lets it stand alone: significantly faster than every
    other configuration that fits, or tied with some (named; the ranking below has the steps that would decide)."""
    best = best_config(results)
    if best is None:
        return "# best: none (no configuration fits in memory with a correct check)"
    ties, unknown = tied_configs(results, best)
    line = (f"# best: {named[best.name]} — {best['samples_per_s']:.1f} samples/s, step "
            f"{best[col.STEP_TIME_MS_P50]:.1f} ms (95 % CI {step_ci_text(best)}), "
            f"peak {_num(_mib(best[col.PEAK_MEM_BYTES]), 0)} MiB")
    if throughput_ci(best) is None:
        return line + "; the highest point figure only: without a 95 % CI nothing says it is faster (ranking below)"
    if ties:
        line += (f"; not significantly faster than {', '.join(named[index] for index in ties)} (95 % CIs of the step "
                 "time overlap: a tie; the ranking below says how many steps would separate them)")
    elif len(results) > 1 and not unknown:
        line += "; significantly faster than every other configuration that fits and passes"
    if unknown:
        line += f"; no 95 % CI to compare with: {', '.join(named[index] for index in unknown)}"
    return line


def key_numbers(results: pd.DataFrame) -> pd.DataFrame:
    """The report's key numbers of a training run: the end table's columns with its one exposed figure (the others
    stay in results.csv), the recommended configuration and its ties marked."""
    table = pd.DataFrame({
        "configuration": short_labels(results),
        "precision": [row_precision(row) for _, row in results.iterrows()],
        "step p50 (ms)": results[col.STEP_TIME_MS_P50].round(1),
        "step p50 95% CI (ms)": [step_ci_text(row) for _, row in results.iterrows()],
        "samples/s (all ranks)": results[col.SAMPLES_PER_S].round(1),
        "tokens/s per rank": _column(results, col.TOKENS_PER_S_PER_RANK).round(0),
        "MFU (%)": _column(results, col.MFU_PCT).round(1),
        "exposed comm (ms)": _column(results, col.EXPOSED_COMM_MS_BASELINE).round(1),
        # headers over 16 characters wrap at their spaces on the report's page (report/html_tables.py): the table
        # then fits 1200 px in one part
        "overlap, trace (%)": _column(results, col.OVERLAP_PCT).round(0)})
    if _column(results, "bucket_count").notna().any():
        table["DDP buckets (count)"] = _column(results, "bucket_count")
    table["peak memory (MiB)"] = (results[col.PEAK_MEM_BYTES] / 2**20).round(0)
    table["model state (MiB)"] = (results[col.MODEL_STATE_BYTES] / 2**20).round(2)
    table["predicted state (MiB)"] = (results[col.MODEL_STATE_BYTES_PREDICTED] / 2**20).round(2)
    table["#wrong"] = results[common.N_WRONG]
    best = best_config(results)
    ties, _ = tied_configs(results, best)
    table["best"] = ["◀ best" if best is not None and index == best.name else "◀ tie" if index in ties else ""
                     for index in results.index]
    return table
