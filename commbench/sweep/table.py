"""Terminal tables of collective rows. By default one short table per collective × impl × timing mode: only the
placements it measured, units in every header, rows flagged in a word and the noise said once under all tables
(short_table.py). verbose: nccl-tests' full layout (both placement groups, a legend under every table, flags spelt
out: verbose_table.py). This module picks the layout, splits the rows by environment and notes the refused ones."""

from typing import cast

import pandas as pd

from commbench.names import NOT_AVAILABLE, PER_ITERATION
from commbench.sweep import host_issue
from commbench.sweep.expected_text import expected_summary
from commbench.sweep.short_table import NoiseCount, short_ratio_table, short_table
from commbench.sweep.verbose_table import verbose_ring_vs_builtin, verbose_table


def format_tables(results: pd.DataFrame, verbose: bool = False) -> str:
    """One table per collective, implementation and timing mode, each closed by nccl-tests' Avg bus bandwidth (the
    mean busbw of its rows) and the mean busbw over sizes ≥ 1 MiB; then the ring/builtin busbw ratio of every
    collective both implementations ran. Short by default, with the noise said once at the end; verbose: the full
    layout with a legend under each table."""
    results = _with_timing(results)
    measured, unavailable = _split_unavailable(results)
    noise = NoiseCount()
    blocks = []
    for env, rows in _by_env(measured):
        blocks += [f"# env: {env}\n{block}" if env else block for block in _env_blocks(rows, noise, verbose)]
    blocks += _unavailable_lines(unavailable)
    host = host_issue.host_issue_sentence(measured, quiet_when_not_applicable=not verbose)
    host_line = "" if host is None else f"\n# {host}"
    if verbose:
        return "\n\n".join(blocks) + host_line
    return "\n\n".join(blocks) + "\n" + expected_summary(measured) + "\n" + noise.summary() + host_line


def _env_blocks(rows: pd.DataFrame, noise: NoiseCount, verbose: bool) -> list[str]:
    """The tables of one environment: a table per collective × impl × timing, then a ring-vs-builtin table per
    collective × timing that both implementations ran."""
    # groupby over a list of columns gives tuple keys: (collective, impl, timing) and (collective, timing)
    tables = [(cast(tuple[str, str, str], key), group)
              for key, group in rows.groupby(["collective", "impl", "timing"], sort=False)]
    pairs = [(cast(tuple[str, str], key), group)
             for key, group in rows.groupby(["collective", "timing"], sort=False)
             if {"builtin", "ring"} <= set(group["impl"])]
    if verbose:
        return [verbose_table(*key, group) for key, group in tables] + \
            [verbose_ring_vs_builtin(*key, group) for key, group in pairs]
    return [short_table(*key, group, noise) for key, group in tables] + \
        [short_ratio_table(*key, group) for key, group in pairs]


def _split_unavailable(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(measured rows, rows of environment combinations that were refused: noted "not available: ...")."""
    notes = results["note"].astype(object).where(results["note"].notna(), "").astype(str) \
        if "note" in results.columns else pd.Series("", results.index)
    refused = notes.str.startswith(NOT_AVAILABLE)
    return results[~refused], results[refused]


def _by_env(results: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(env label, its rows) in run order; one ("", rows) for runs without --env-axis."""
    if "env" not in results.columns:
        return [("", results)]
    labels = results["env"].astype(object).where(results["env"].notna(), "").astype(str)
    return [(str(env), group) for env, group in results.groupby(labels, sort=False)]


def _unavailable_lines(rows: pd.DataFrame) -> list[str]:
    """One line per refused environment combination: what it would have measured, and NCCL's (or gloo's) words."""
    lines = []
    labels = rows["env"].astype(object).where(rows["env"].notna(), "").astype(str)
    for (env, note), group in rows.groupby([labels, rows["note"]], sort=False):
        lines.append(f"# env: {env}: {len(group)} point(s) {note}")
    return ["\n".join(lines)] if lines else []


def _with_timing(results: pd.DataFrame) -> pd.DataFrame:
    if "timing" in results.columns and results["timing"].notna().all():
        return results
    results = results.copy()
    filled = results["timing"] if "timing" in results.columns else pd.Series(None, index=results.index)
    results["timing"] = filled.fillna(PER_ITERATION)
    return results

