"""How `commbench compare` shows a comparison: the terminal table, GitHub Markdown, the --json document, and the
notes on how far its verdicts can be trusted.

The notes say when the verdicts deserve less trust than they look: a side that is one launch rather than a run set
(launch noise is then outside the test, and only a change beyond the launch-noise floor can be a regression: the
note says which floor and where it came from), and rows whose 95 % CI of the median is wider than ±10 % on a side
(the table's `wide CI` column). They inform; they do not change a verdict or the gate."""

import textwrap
from collections.abc import Sequence
from pathlib import Path

from commbench.gate.expected import BELOW_EXPECTED
from commbench.gate.gate_verdict import gate_fails, gate_line
from commbench.gate.launch_tests import TEST_LAUNCHES, TEST_SAMPLES, Floor
from commbench.gate.sides import expected_note, paired_bench_sets, run_folders, source_notes
from commbench.gate.verdicts import (
    ALPHA,
    IMPROVED,
    INCOMPLETE,
    MISSING,
    NEW,
    NO_FIGURE,
    NOISE,
    NOT_COMPARABLE,
    OK,
    REGRESSION,
    UNCHECKED,
    UNCHECKED_WHY,
    WIDE_CI_PCT,
    WRONG,
)
from commbench.measure.stats import CONFIDENCE

RUN_SET_LAUNCHES = 3
"""What the notes advise: launches per run set (--launches; the committed baseline has 5, .ci/run's gate 3)."""


def _metric_text(entry: dict) -> str:
    return f"{entry['metric']} ({entry['unit']})" if entry.get("unit") else entry.get("metric", "")



def launches(path: Path) -> int:
    """How many launches a side holds: 1 for a run (or a suite run), N for a run set of N."""
    return len(run_folders(path))


def trust_notes(baseline_dir: Path, new_dir: Path, entries: list[dict], floor: Floor) -> list[str]:
    """What makes the verdicts less trustworthy than they look, and what to do about it (empty when nothing)."""
    chosen = paired_bench_sets(baseline_dir, new_dir).chosen
    found = [chosen] if chosen else []
    counts = {"baseline": launches(baseline_dir), "new": launches(new_dir)}
    names = {"baseline": "the baseline", "new": "the new side"}
    single = [side for side, count in counts.items() if count == 1]
    if single:
        if len(single) == 2:
            what = "single launches: the baseline and the new side are one run folder each, not run sets"
        else:
            other = "new" if single == ["baseline"] else "baseline"
            what = (f"single launch: {names[single[0]]} is one run folder, not a run set ({names[other]} is a run "
                    f"set of {counts[other]})")
        found.append(f"{what}, so launch-to-launch variation (on a shared machine larger than the variation within "
                     "a launch) is outside the samples' significance test: a change within the launch-noise floor is "
                     f"~, never a regression. The floor takes {floor.noise_pct:.1f} % launch noise from "
                     f"{floor.source}{_detectable_range(entries)}. Use run sets, tested across launches: run the "
                     f"same sweep or suite with --launches {RUN_SET_LAUNCHES} (or more) on both sides, and compare "
                     "the two run set folders")
    found += _stand_in_notes(entries)
    found += source_notes(baseline_dir, new_dir)
    found += expected_note(new_dir, entries)
    assessed = [entry for entry in entries if entry.get("wide_ci") is not None]
    wide = [entry for entry in assessed if entry["wide_ci"]]
    if wide:
        found.append(f"{len(wide)} of {len(assessed)} rows {'has' if len(wide) == 1 else 'have'} a "
                     f"{CONFIDENCE * 100:g} % CI (of the median) wider "
                     f"than ±{WIDE_CI_PCT:g} % on a side (column wide CI): their verdicts rest on noisy points. "
                     "Measure more iterations per point (sweep: a larger --iters, or --target-ci "
                     f"{WIDE_CI_PCT:g} to sample until the CI is within ±{WIDE_CI_PCT:g} %; training: a larger "
                     "--steps)")
    return found


def _stand_in_notes(entries: list[dict]) -> list[str]:
    """Rows judged on another metric than the one gated (busbw 0 on a side: judged on time), one note per pair."""
    pairs: dict[tuple[str, str], int] = {}
    for entry in entries:
        if entry.get("instead_of"):
            key = (entry["instead_of"], entry["metric"])
            pairs[key] = pairs.get(key, 0) + 1
    return [f"{count} row(s) have {gated} 0 (or none) on a side, so no {gated} ratio: nccl-tests prints busbw to "
            f"0.01 GB/s, and its small sizes read 0.00 however their times differ. At one size {gated} follows from "
            f"the {judged}, so these rows are judged on {judged} instead (their metric column), at the {gated} "
            "threshold" for (gated, judged), count in pairs.items()]


def _detectable_range(entries: list[dict]) -> str:
    """", so the smallest change a row could show as a regression is 41.0-44.2 % (column detectable)" over the rows
    the floor judged ("" when none)."""
    found = [entry["detectable_pct"] for entry in entries if entry.get("floor_pct") is not None]
    if not found:
        return ""
    low, high = f"{min(found):.1f}", f"{max(found):.1f}"
    shown = low if low == high else f"{low}-{high}"
    return f", so the smallest change a row could show as a regression is {shown} % (column detectable)"


def _detectable_text(entry: dict) -> str:
    return "-" if entry.get("detectable_pct") is None else f"{entry['detectable_pct']:.1f}"


def _wide_text(entry: dict, *, short: bool) -> str:
    """The wide-CI column: which side's CI is wider than WIDE_CI_PCT, "no", or "-" for a metric without a CI."""
    if entry.get("wide_ci") is None:
        return "-"
    sides = entry["wide_ci_sides"]
    if not sides:
        return "no"
    if len(sides) == 2:
        return "both"
    return "base" if short and sides == ["baseline"] else sides[0]


UNMATCHED = {MISSING: "row(s) of the baseline have no counterpart in the new run",
             NEW: "row(s) of the new run are not in the baseline",
             NOT_COMPARABLE: "row(s) are in both but not comparable",
             UNCHECKED: "row(s) of the new run were not checked (n_wrong empty: --no-check, -c 0, or a source without "
                        "#wrong): their speed is judged, their results are unverified"}
"""How the rows that did not join, or were not checked, are summed up, one line per verdict and reason (--verbose
lists them)."""
LONGEST_LINE = 200
"""The widest line compare prints where stdout is not a terminal (a CI log); on a terminal, its width."""


def output_width() -> int:
    import shutil
    import sys

    return shutil.get_terminal_size((LONGEST_LINE, 24)).columns if sys.stdout.isatty() else LONGEST_LINE


def format_terminal(entries: list[dict], *, allow_missing: bool = False, notes: Sequence[str] = (),
                    verbose: bool = False, width: int = LONGEST_LINE) -> str:
    """The table (rows that did not join summed up unless verbose), the notes, the summary and the gate's line,
    every line at most `width` characters (a longer table row continues on the next line, indented)."""
    lines = [f"{'row':<52} {'metric (unit)':>17} {'baseline':>11} {'new':>11} {'ratio':>7} {'change':>15} {'p':>8} "
             f"{'detectable':>10} {'wide CI':>8} verdict",
             f"{'':<52} {'':>17} {'':>11} {'':>11} {'(new/b)':>7} {'(% of b)':>15} {'(1-sided)':>8} "
             f"{'(% of b)':>10} {f'(>±{WIDE_CI_PCT:g} %)':>8}"]
    unmatched: dict[tuple[str, str], int] = {}
    for entry in entries:
        if "ratio" not in entry:
            if entry["verdict"] in UNMATCHED and not verbose and not entry["row"].startswith("bench "):
                key = (entry["verdict"], entry["why"])
                unmatched[key] = unmatched.get(key, 0) + 1
                continue
            lines.append(f"{entry['row']:<52} {entry.get('metric', ''):>17} {entry['verdict']}: {entry['why']}")
            continue
        p = "-" if entry["p_value"] is None else f"{entry['p_value']:.2g}"
        lines.append(f"{entry['row']:<52} {_metric_text(entry):>17} {entry['baseline']:>11.4g} {entry['new']:>11.4g} "
                     f"{entry['ratio']:>7.3f} {entry['change']:>15} {p:>8} {_detectable_text(entry):>10} "
                     f"{_wide_text(entry, short=True):>8} {entry['verdict']}")
    for (verdict, why), count in unmatched.items():
        reason = "" if why in ("not in the new run", "not in the baseline", UNCHECKED_WHY) \
            else f": {why.split(': ', 1)[-1]}"
        lines.append(f"# {verdict}: {count} {UNMATCHED[verdict]}{reason} (--verbose lists them)")
    for note in notes:  # wrapped: a note is a paragraph, the table's lines are what a reader scans
        lines += textwrap.wrap(note, width=min(118, width), initial_indent="# note: ", subsequent_indent="#       ",
                               break_on_hyphens=False)
    lines += textwrap.wrap(f"# {_summary(entries)}", width=width, subsequent_indent="#   ", break_on_hyphens=False)
    lines = [part for line in lines for part in _folded(line, width)]
    # last, and whole: selftest and CI logs read the last "# " line; its long lists are cut to a count already
    lines.append(textwrap.shorten(f"# {gate_line(entries, allow_missing=allow_missing)}", width=width,
                                  placeholder=" …"))
    return "\n".join(lines)


def _folded(line: str, width: int) -> list[str]:
    """A line longer than width as pieces of it, the later ones indented (a long row label, a long reason)."""
    if len(line) <= width:
        return [line]
    return textwrap.wrap(line, width=width, subsequent_indent="    ", break_on_hyphens=False, drop_whitespace=False) \
        or [line[:width]]


def format_markdown(entries: list[dict], *, baseline: Path, new: Path, allow_missing: bool = False,
                    notes: Sequence[str] = ()) -> str:
    gate = gate_line(entries, allow_missing=allow_missing)
    lines = [f"### commbench compare: `{new}` against `{baseline}`", "", _summary(entries), "",
             f"**{gate}**" if gate_fails(entries, allow_missing=allow_missing) else gate, "",
             "| row | metric (unit) | baseline | new | ratio (new/baseline) | change (% of baseline) | "
             "p (one-sided) | detectable change (% of baseline) | "
             f"wide CI ({CONFIDENCE * 100:g} % CI beyond ±{WIDE_CI_PCT:g} %) | verdict |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for entry in entries:
        if "ratio" not in entry:
            metric = entry.get("metric", "")
            lines.append(f"| {entry['row']} | {metric} | | | | | | | | {entry['verdict']}: {entry['why']} |")
            continue
        p = "-" if entry["p_value"] is None else f"{entry['p_value']:.2g}"
        verdict = f"**{entry['verdict']}**" if entry["verdict"] == REGRESSION else entry["verdict"]
        lines.append(f"| {entry['row']} | {_metric_text(entry)} | {entry['baseline']:.4g} | {entry['new']:.4g} | "
                     f"{entry['ratio']:.3f} | {entry['change']} | {p} | {_detectable_text(entry)} | "
                     f"{_wide_text(entry, short=False)} | {verdict} |")
    if notes:
        lines += ["", "**Notes**", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


ENTRY_FIELDS = ("row", "metric", "baseline", "new", "ratio", "worse_pct", "change", "threshold_pct", "p_value",
                "test", "launches", "floor_pct", "detectable_pct", "verdict", "why", "wide_ci", "wide_ci_sides",
                "ci_half_width_pct", "source", "instead_of")
"""Every field of a --json entry; an entry without a figure (missing, new, ...) has null for those it lacks."""


def json_document(entries: list[dict], notes: list[str], *, baseline: Path, new: Path, thresholds: dict[str, float],
                  allow_missing: bool, floor: Floor) -> dict:
    """What `compare --json` prints: the entries, the notes, the gate's verdict and what it was measured with."""
    return {
        "baseline": baseline, "new": new,
        "launches": {"baseline": launches(baseline), "new": launches(new)},
        "launch_noise": {"pct": floor.noise_pct, "source": floor.source},
        "thresholds_pct": thresholds, "alpha": ALPHA, "wide_ci_pct": WIDE_CI_PCT,
        "entries": [{field: entry.get(field) for field in ENTRY_FIELDS} for entry in entries],
        "notes": notes,
        "summary": _summary(entries),
        "gate": {"passed": not gate_fails(entries, allow_missing=allow_missing),
                 "line": gate_line(entries, allow_missing=allow_missing), "allow_missing": allow_missing},
    }


def _summary(entries: list[dict]) -> str:
    counts = {verdict: sum(entry["verdict"] == verdict for entry in entries)
              for verdict in (REGRESSION, WRONG, BELOW_EXPECTED, NOISE, IMPROVED, OK, UNCHECKED, NEW, MISSING,
                              INCOMPLETE, NOT_COMPARABLE, NO_FIGURE)}
    text = ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count)
    tests = {"Welch t on the log per-launch values": TEST_LAUNCHES, "Mann–Whitney U on the samples": TEST_SAMPLES}
    tested = ", ".join(f"{name} for {count} row(s)" for name, test in tests.items()
                       if (count := sum(entry.get("test") == test for entry in entries)))
    return f"{text or 'nothing to compare'} (regression = worse beyond threshold and p < {ALPHA} one-sided, " \
           f"p by {tested or ' or '.join(tests)}; ~ = beyond threshold, not significant or within the launch-noise " \
           "floor)"
