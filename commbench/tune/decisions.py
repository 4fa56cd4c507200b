"""Per measured size, which environment combination is fastest and whether it beats every other beyond noise.

Rows are compared only within a group: one collective, impl, backend, dtype, op, placement, timing mode, world size
and node count, so that the only thing that differs between the candidates at a size is the environment. The best
is the lowest median time (time_us_p50); its margin is the second-best time ÷ the best time − 1, in %. It wins beyond
noise when its 95 % CI lies wholly below every other candidate's (best's time_us_ci_hi < every other's
time_us_ci_lo), or, where a candidate has no CI (an import: one printed time, no samples), when the margin exceeds
--margin-pct. Otherwise the sizes tie and NCCL should keep deciding."""

import math
from dataclasses import dataclass, field
from typing import cast

import pandas as pd

from commbench.errors import CommbenchError
from commbench.measure.stats import as_number
from commbench.names import NOT_AVAILABLE
from commbench.schema import common
from commbench.tune.runs import ENV, NODES, RUN

GROUP_KEYS = ("collective", "impl", "backend", "dtype", "op", "inplace", "timing", common.WORLD_SIZE, NODES)
DECIDED, TIE, ALONE = "decided", "tie", "alone"
"""A size's outcome: a winner beyond noise; no winner beyond noise; fewer than two usable candidates."""
CI_RULE, MARGIN_RULE = "ci", "margin"


@dataclass(frozen=True)
class Candidate:
    env: str
    run: str
    time_us: float
    ci_lo_us: float
    ci_hi_us: float
    """NaN where the row has no CI (an import, or fewer samples than a CI needs)."""

    @property
    def has_ci(self) -> bool:
        return math.isfinite(self.ci_lo_us) and math.isfinite(self.ci_hi_us)


@dataclass(frozen=True)
class Skipped:
    """A row left out of the comparison, and why (NCCL refused its combination, wrong results, no time)."""

    env: str
    run: str
    why: str


@dataclass(frozen=True)
class SizeDecision:
    size_bytes: int
    ranked: tuple[Candidate, ...]
    """The usable candidates, fastest first."""
    skipped: tuple[Skipped, ...]
    margin_pct: float | None
    beyond_noise: bool
    rule: str | None
    """CI_RULE or MARGIN_RULE: the test that judged the margin; None with fewer than two candidates."""

    @property
    def outcome(self) -> str:
        if len(self.ranked) < 2:
            return ALONE
        return DECIDED if self.beyond_noise else TIE

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


@dataclass
class Group:
    key: dict
    """GROUP_KEYS → the group's values."""
    rows: pd.DataFrame
    sizes: list[SizeDecision] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def envs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.rows[ENV]))

    def usable_rows(self) -> pd.DataFrame:
        """The rows that took part in a comparison (not refused, not wrong, with a time): what the fits read."""
        used = {(candidate.env, decision.size_bytes) for decision in self.sizes for candidate in decision.ranked}
        keep = [(env, int(size)) in used for env, size in zip(self.rows[ENV], self.rows[common.SIZE_BYTES])]
        return self.rows[keep]

    def label(self) -> str:
        key = self.key
        placement = "in-place" if key["inplace"] else "out-of-place"
        nodes = f" on {key[NODES]} node(s)" if key[NODES] >= 0 else ""
        return (f"{key['collective']} {key['dtype']} {key['op']} {placement}, {key['timing']} timing, "
                f"{key['backend']} {key['impl']}, {key['world_size']} ranks{nodes}")

    def variant(self) -> str:
        """What tells this group from another of the same collective and topology."""
        placement = "in-place" if self.key["inplace"] else "out-of-place"
        return f"{self.key['dtype']} {self.key['op']} {placement} {self.key['timing']} {self.key['impl']}"


def decide(rows: pd.DataFrame, margin_pct: float) -> list[Group]:
    """The groups of the rows, each with its per-size decisions (sizes ascending)."""
    rows = rows.assign(inplace=rows["inplace"].map(_is_true), size_bytes=rows[common.SIZE_BYTES].astype("int64"),
                       world_size=rows[common.WORLD_SIZE].astype("int64"))
    groups = []
    for values, members in rows.groupby(list(GROUP_KEYS), sort=True, dropna=False):
        group = Group(dict(zip(GROUP_KEYS, values)), members)
        empty = members[members[common.SIZE_BYTES] <= 0]
        if len(empty):  # nccl-tests prints 0-byte rows; NCCL returns before it chooses an algorithm for them
            group.notes.append(f"{len(empty)} row(s) of 0 bytes left out: NCCL moves nothing and tunes nothing there")
        for size, at_size in members[members[common.SIZE_BYTES] > 0].groupby(common.SIZE_BYTES, sort=True):
            # size_bytes was made int64 above; pandas types a group's key as any scalar
            group.sizes.append(_decide_size(int(cast(int, size)), at_size, margin_pct, group))
        sources = sorted(set(members["source"].dropna().astype(str))) if "source" in members else []
        if len(sources) > 1:
            group.notes.append(f"rows from {', '.join(sources)} side by side: their timing methods differ "
                               "(docs/timing.md), which is part of any margin between them")
        groups.append(group)
    return groups


def _decide_size(size: int, rows: pd.DataFrame, margin_pct: float, group: Group) -> SizeDecision:
    twice = rows[rows.duplicated(ENV, keep=False)]
    if len(twice):
        env = twice.iloc[0][ENV] or "the default environment"
        raise CommbenchError(f"{' and '.join(sorted(set(twice[RUN])))} both measured {group.label()} at {size} B "
                             f"under {env}; pass one of them (tune compares environments, not repeats)")
    ranked, skipped = [], []
    for _, row in rows.iterrows():
        why = _unusable(row)
        if why:
            skipped.append(Skipped(row[ENV], row[RUN], why))
        else:
            ranked.append(Candidate(row[ENV], row[RUN], float(row[common.TIME_US_P50]),
                                    _number(row, common.TIME_US_CI_LO), _number(row, common.TIME_US_CI_HI)))
    ranked.sort(key=lambda candidate: candidate.time_us)
    if len(ranked) < 2:
        return SizeDecision(size, tuple(ranked), tuple(skipped), None, False, None)
    best, others = ranked[0], ranked[1:]
    margin = (others[0].time_us / best.time_us - 1.0) * 100.0
    if all(candidate.has_ci for candidate in ranked):
        beyond, rule = all(best.ci_hi_us < other.ci_lo_us for other in others), CI_RULE
    else:
        beyond, rule = margin > margin_pct, MARGIN_RULE
    return SizeDecision(size, tuple(ranked), tuple(skipped), margin, beyond, rule)


def _unusable(row: pd.Series) -> str:
    """Why a row cannot take part in the comparison; "" when it can."""
    cell = row.get("note")
    note = cell if isinstance(cell, str) else ""  # an empty cell reads as NaN
    if note.startswith(NOT_AVAILABLE):  # NCCL refused the combination: the row has no time
        return note
    time = _number(row, common.TIME_US_P50)
    if not math.isfinite(time):
        return f"no time measured{': ' + note if note else ''}"
    wrong = _number(row, common.N_WRONG)
    if math.isfinite(wrong) and wrong > 0:
        return f"wrong results ({int(wrong)} wrong element(s)): its time is not valid"
    if time <= 0:
        return "a median time of 0, below the timer's resolution"
    return ""


def _number(row: pd.Series, column: str) -> float:
    return as_number(row.get(column))  # absent (None) or not a number: NaN, no figure


def _is_true(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1")
