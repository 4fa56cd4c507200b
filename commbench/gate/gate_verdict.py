"""The gate's verdict over a comparison's entries: whether it fails (a regression, a wrong result, a row below its
expected busbw, or, without --allow-missing, a baseline row the new side lacks or a new run that did not complete)
and the one line that says so."""

from collections.abc import Sequence

from commbench.gate.expected import below
from commbench.gate.verdicts import INCOMPLETE, MISSING, REGRESSION, UNCHECKED, WRONG, Entry


def regressions(entries: Sequence[Entry]) -> int:
    return sum(entry["verdict"] == REGRESSION for entry in entries)


def unproven(entries: Sequence[Entry]) -> list[Entry]:
    """The entries that keep the new side from showing that nothing got worse: baseline rows or benches it lacks,
    and its runs that did not complete."""
    return [entry for entry in entries if entry["verdict"] in (MISSING, INCOMPLETE)]


def wrong(entries: Sequence[Entry]) -> list[Entry]:
    return [entry for entry in entries if entry["verdict"] == WRONG]


def unchecked(entries: Sequence[Entry]) -> list[Entry]:
    return [entry for entry in entries if entry["verdict"] == UNCHECKED]


def gate_fails(entries: list[Entry], *, allow_missing: bool) -> bool:
    return regressions(entries) > 0 or bool(wrong(entries)) or bool(below(entries)) or \
        (bool(unproven(entries)) and not allow_missing)


def listed(names: list[str], most: int = 2) -> str:
    """The first names and how many more: the gate's verdict is one line a log can show whole."""
    shown = "; ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more (compare --verbose lists them)"


def _rows(entries: list[Entry]) -> list[str]:
    return [str(entry["row"]) for entry in entries]


def _problems(entries: list[Entry]) -> list[str]:
    """What --allow-missing accepts: the baseline rows the new side misses, its runs that did not complete."""
    problems = []
    missing = [entry for entry in entries if entry["verdict"] == MISSING]
    if missing:
        problems.append(f"the new side misses {len(missing)} baseline row(s): {listed(_rows(missing))}")
    incomplete = [entry for entry in entries if entry["verdict"] == INCOMPLETE]
    if incomplete:  # their paths and reasons are rows of the table: this line stays one a log shows whole
        problems.append(f"{len(incomplete)} new run(s) did not complete (the table says which and why)")
    return problems


def _failures(entries: list[Entry]) -> list[str]:
    """Why the gate fails, whatever --allow-missing: regressions, wrong results, rows below their expected busbw."""
    count = regressions(entries)
    reasons = [f"{count} regression(s)"] if count else []
    if wrong(entries):
        reasons.append(f"{len(wrong(entries))} new row(s) with wrong results: " + listed(_rows(wrong(entries))))
    if below(entries):
        reasons.append(f"{len(below(entries))} new row(s) below {below(entries)[0]['threshold_pct']:g} % of their "
                       "expected busbw: " + listed(_rows(below(entries))))
    return reasons


def gate_line(entries: list[Entry], *, allow_missing: bool) -> str:
    """The gate's verdict and why, naming the missing rows and the runs that did not complete."""
    problems = _problems(entries)
    if gate_fails(entries, allow_missing=allow_missing):
        reasons = _failures(entries)
        if problems and not allow_missing:
            reasons += problems + ["--allow-missing accepts these"]
        return "gate: FAILED: " + ". ".join(reasons)
    if problems:
        return "gate: passed with --allow-missing, which accepted: " + ". ".join(problems) + _unverified(entries)
    return "gate: passed" + _unverified(entries)


def _unverified(entries: list[Entry]) -> str:
    """What a pass does not vouch for: the new rows no check verified ("" when every row was checked)."""
    found = unchecked(entries)
    if not found:
        return ""
    return f"; {len(found)} new row(s) unchecked (n_wrong empty): their results were not verified"
