"""hunt's second pass: which pairs to measure again (confirm_plan), and which first-pass suspects they confirm
(confirm). Each suspect is re-paired with known-good nodes, every round topped up with control pairs of known-good
nodes so that it runs under the load of a first-pass round, and judged against those controls: the noise bar, the
rank test, most repeats, and for stalls the permutation test again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.cluster.diagnosis import (
    BANDWIDTH,
    INTRA,
    LATENCY,
    PAIR_METRICS,
    STALLS,
    Diagnosis,
    PairMetric,
    Settings,
    exchanges_by_pair,
)
from commbench.cluster.pair_statistics import (
    Samples,
    better_middle,
    p_rounded,
    pair_repeat_slowdowns,
    pooled,
    rank_p,
    repeat_slowdowns,
    rounded,
    slower_pct,
)
from commbench.cluster.pairing import disjoint_rounds

if TYPE_CHECKING:  # numpy comes with stalls: imported where the second pass judges, not when the CLI lists commands
    from commbench.cluster.stalls import Exchanges

Pair = tuple[str, str]
"""Two nodes measured together, in the order they were paired."""


@dataclass(frozen=True)
class Plan:
    """The second pass: rounds of node pairs to measure again (each round's suspects' pairs and controls), and the
    nodes whose intra-node all_reduce to measure again (all of them, when any node is suspect there)."""

    rounds: tuple[tuple[tuple[str, str], ...], ...]
    controls: tuple[tuple[str, str], ...]
    intra: tuple[str, ...]


def confirm_plan(nodes: list[str], diagnosis: Diagnosis, *, partners: int) -> Plan:
    """Every suspect re-paired with known-good nodes (no suspect, not an end of a suspect link): a suspect node with
    up to `partners` of them; a suspect link measured again, and each of its ends with a good node."""
    suspects = set(diagnosis.suspect_nodes) | {end for link in diagnosis.suspect_links for end in link}
    good = [node for node in nodes if node not in suspects]
    order = {node: index for index, node in enumerate(nodes)}
    pairs: list[tuple[str, str]] = []

    def add(a: str, b: str) -> None:
        first, second = sorted((a, b), key=order.__getitem__)
        pair = (first, second)
        if a != b and pair not in pairs:
            pairs.append(pair)

    turn = 0
    for node, evidence in diagnosis.suspect_nodes.items():
        if not any(entry["test"] in (BANDWIDTH.name, LATENCY.name, STALLS) for entry in evidence):
            continue
        chosen = good[:partners] or [peer for entry in evidence for peer in entry.get("slow_with", [])][:partners]
        for peer in chosen:
            add(node, peer)
    for a, b in diagnosis.suspect_links:
        add(a, b)
        for end in (a, b):
            others = [node for node in good if node not in (a, b)]
            if others:
                add(end, others[turn % len(others)])
                turn += 1
    intra_suspect = any(entry["test"] == INTRA.name for evidence in diagnosis.suspect_nodes.values()
                        for entry in evidence)
    rounds, controls = _with_controls(disjoint_rounds(pairs), good)
    return Plan(tuple(map(tuple, rounds)), tuple(controls), tuple(nodes) if intra_suspect else ())


def _with_controls(rounds: list[list[Pair]], good: list[str]) -> tuple[list[list[Pair]], list[Pair]]:
    """Each round topped up with pairs of idle known-good nodes; one control round more if none fit."""
    controls: list[Pair] = []
    for round_ in rounds:
        busy = {node for pair in round_ for node in pair}
        idle = [node for node in good if node not in busy]
        for index in range(0, len(idle) - 1, 2):
            round_.append((idle[index], idle[index + 1]))
            controls.append((idle[index], idle[index + 1]))
    if rounds and not controls and len(good) >= 2:
        rounds.append([(good[0], good[1])])
        controls.append((good[0], good[1]))
    return rounds, controls


def second_references(first: Diagnosis, controls: dict[tuple[str, str], dict[str, float]],
                      second_intra: dict[str, float]) -> dict[str, float]:
    """What the second pass is judged against: its controls' better middle (its intra-node figures' for the
    intra-node test); the first pass's reference where it has none, or where a baseline gives that metric's
    reference."""
    references = dict(first.references)
    for metric in PAIR_METRICS:
        values = [figures[metric.column] for figures in controls.values() if figures.get(metric.column) is not None]
        if values and metric.name in references and not first.from_baseline(metric.name):
            references[metric.name] = better_middle(values, higher_is_better=metric.higher_is_better)
    if second_intra and INTRA.name in references and not first.from_baseline(INTRA.name):
        references[INTRA.name] = better_middle(list(second_intra.values()), higher_is_better=True)
    return references


@dataclass(frozen=True)
class SecondPass:
    """What the confirmation gathers before it judges: the first pass's suspects, the second pass's figures (each
    re-pair's, the intra-node ones) and samples, its controls, and the references it is judged against."""

    first: Diagnosis
    pairs: dict[Pair, dict[str, float]]
    intra: dict[str, float]
    settings: Settings
    references: dict[str, float]
    """second_references: what each metric of the second pass is held against."""
    controls: frozenset[Pair]
    samples: Samples
    first_samples: Samples
    repeats: list[Samples]
    suspects: frozenset[str]
    """Every first-pass suspect node, and both ends of every suspect link."""

    def slower(self, pair: Pair, metric: PairMetric) -> float | None:
        """How much slower than the second pass's reference the pair (either order) measured, None if unmeasured."""
        figures = self.pairs.get(pair) or self.pairs.get((pair[1], pair[0]))
        value = figures.get(metric.column) if figures else None
        if value is None:
            return None
        return slower_pct(value, self.references[metric.name], higher_is_better=metric.higher_is_better)


def confirm(first: Diagnosis, second_pairs: dict[Pair, dict[str, float]],
            second_intra: dict[str, float], settings: Settings,
            controls: dict[Pair, dict[str, float]] | None = None,
            samples: Samples | None = None, first_samples: Samples | None = None,
            repeats: list[Samples] | None = None) -> Diagnosis:
    """The named suspects: those of the first pass that the second pass measured slow again against its own
    reference (second_references), with its samples (every repeat of each re-pair, pooled) slower than the control
    pairs' by the rank test, or (stalls) losing significantly more time to stalls than the controls. A link
    measured slow again with one end also slow against a good node names that end."""
    second = SecondPass(first, second_pairs, second_intra, settings,
                        second_references(first, controls or {}, second_intra), frozenset(controls or {}),
                        samples or {}, first_samples or {}, repeats or [],
                        frozenset(first.suspect_nodes) | {end for link in first.suspect_links for end in link})
    final = Diagnosis(references=dict(first.references), reference_sources=dict(first.reference_sources),
                      reference_source=first.reference_source,
                      notes=list(first.notes), detectable=dict(first.detectable), noise_bar=dict(first.noise_bar))
    final.second_references = second.references
    for node, evidence in first.suspect_nodes.items():
        for entry in evidence:
            _settle(final, node, *_node_again(second, node, entry))
    for link, evidence in first.suspect_links.items():
        for entry in evidence:
            _settle_link(final, link, _link_again(second, link, entry))
    _explain_links_by_nodes(final)
    return final


_METRICS = {metric.name: metric for metric in (*PAIR_METRICS, INTRA)}


def _node_again(second: SecondPass, node: str, entry: dict) -> tuple[dict, bool]:
    """A suspect node's first-pass entry with its second-pass figures, and whether they confirm it."""
    if entry["test"] == STALLS:
        return _stalls_again(node, entry, second.samples, second.first_samples, set(second.controls),
                             set(second.suspects), second.settings)
    metric = _METRICS[entry["test"]]
    found, confirmed = _intra_again(second, node) if metric is INTRA else _pairs_again(second, node, metric)
    return {**entry, "second_pass": found}, confirmed


def _intra_again(second: SecondPass, node: str) -> tuple[dict[str, object], bool]:
    """The node's intra-node all_reduce measured again, against the second pass's intra-node reference."""
    value = second.intra.get(node)
    slower = None if value is None else slower_pct(value, second.references[INTRA.name], higher_is_better=True)
    confirmed = slower is not None and slower >= second.settings.threshold_pct
    return {"value": value, "slower_pct": rounded(slower)}, confirmed


def _pairs_again(second: SecondPass, node: str, metric: PairMetric) -> tuple[dict[str, object], bool]:
    """The node's re-pairs: slow again with most of its known-good partners (beyond the noise bar), slower than the
    controls by the rank test, and slow in most repeats."""
    settings = second.settings
    paired = {b if a == node else a: second.slower((a, b), metric) for a, b in second.pairs if node in (a, b)}
    found: dict[str, object] = {peer: rounded(slower) for peer, slower in paired.items()}
    # the verdict rests on its known-good partners: a suspect link's other end (measured again as the link) is slow
    # with it by that link, whatever the node
    repaired = {peer: slower for peer, slower in paired.items() if peer not in second.suspects} or paired
    bar = second.first.bar(metric.name, settings.threshold_pct)
    slow_again = [slower for slower in repaired.values() if slower is not None and slower >= bar]
    confirmed = bool(repaired) and len(slow_again) * 2 > len(repaired)
    measured = second.samples.get(metric.name, {})
    among = {pair for pair in measured if node in pair and (set(pair) - {node}) <= set(repaired)}
    p = rank_p(pooled(measured, [pair for pair in measured if pair in among]), pooled(measured, second.controls))
    if p is not None:
        found["p"] = p_rounded(p)
        confirmed = confirmed and p < settings.alpha
    each = repeat_slowdowns(node, metric.name, second.repeats, settings.statistic, among=among)
    if each:  # slow in most repeats, not in their pool only: one lucky (or unlucky) repeat decides nothing
        found["repeats_slower_pct"] = [round(value, 2) for value in each]
        confirmed = confirmed and sum(value >= settings.threshold_pct for value in each) * 2 > len(each)
    return found, confirmed


@dataclass(frozen=True)
class _LinkVerdict:
    """Where a suspect link's entry goes: cleared (with a note or none), a suspect node (an end), or the link
    confirmed."""

    record: dict
    cleared: bool = False
    node: str | None = None
    note: str | None = None


def _link_again(second: SecondPass, link: Pair, entry: dict) -> _LinkVerdict:
    """A suspect link measured again, and each of its ends with known-good nodes."""
    metric = _METRICS[entry["test"]]
    link_again = second.slower(link, metric)
    with_good = {end: {b if a == end else a: second.slower((a, b), metric)
                       for a, b in second.pairs if end in (a, b) and set((a, b)) != set(link)}
                 for end in link}
    found: dict[str, object] = {"link": rounded(link_again),
                                **{f"{end} with": {peer: rounded(value) for peer, value in slower.items()}
                                   for end, slower in with_good.items()}}
    bar = second.first.bar(metric.name, second.settings.threshold_pct)
    each = pair_repeat_slowdowns(link, metric.name, second.repeats, second.settings.statistic, set(second.controls))
    if each:
        found["repeats_slower_pct"] = [round(value, 2) for value in each]
    record = {**entry, "second_pass": found}
    if link_again is None or link_again < bar or (each and sum(value >= bar for value in each) * 2 <= len(each)):
        return _LinkVerdict(record, cleared=True)
    # an end is slow too when it is about as slow with known-good nodes as over the link (at least half the link's
    # slowdown): a slow node slows all its pairs alike, a bad link only its own
    end_bar = max(bar, link_again / 2)
    slow_ends = [end for end, slower in with_good.items()
                 if slower and all(value is not None and value >= end_bar for value in slower.values())]
    if len(slow_ends) == 1:
        node = slow_ends[0]
        return _LinkVerdict(record, node=node, note=f"the link {link[0]}–{link[1]} was slow again and {node} was slow "
                                                    "with a known-good node too: the node, not the link")
    if slow_ends:
        return _LinkVerdict(record, cleared=True, note="both ends were slow with known-good nodes too: not this link")
    return _LinkVerdict(record)


def _settle_link(final: Diagnosis, link: Pair, verdict: _LinkVerdict) -> None:
    noted = {} if verdict.note is None else {"note": verdict.note}
    if verdict.cleared:
        final.cleared.append({"link": list(link), **verdict.record, **noted})
    elif verdict.node is not None:
        final.suspect_nodes.setdefault(verdict.node, []).append({**verdict.record, **noted})
    else:
        final.suspect_links.setdefault(link, []).append(verdict.record)


def _explain_links_by_nodes(final: Diagnosis) -> None:
    """A named node explains its slow pairs: a confirmed link with a suspect node at an end is cleared."""
    for link in [link for link in final.suspect_links if set(link) & set(final.suspect_nodes)]:
        for record in final.suspect_links.pop(link):
            final.cleared.append({"link": list(link), **record, "note": "explained by a suspect node at its end"})


def _stalls_again(node: str, entry: dict, samples: Samples, first_samples: Samples, controls: set[Pair],
                  suspects: set[str], settings: Settings) -> tuple[dict, bool]:
    """The stall test again: the node's re-pairs with known-good nodes (every repeat) against the control pairs, or
    where the second pass had none (too few known-good nodes), against the first pass's pairs without the node."""
    from commbench.cluster.stalls import Exchanges, permutation_test

    def exchanges(measured: Samples, wanted: Callable[[Pair], bool]) -> Exchanges:
        return Exchanges.pooled([part for pair, parts in exchanges_by_pair(measured, settings).items()
                                 if wanted(pair) for part in parts])

    mine = exchanges(samples, lambda pair: node in pair and not (set(pair) - {node}) & suspects)
    if not mine.count:  # no known-good partner left: its re-pairs with the other suspects
        mine = exchanges(samples, lambda pair: node in pair)
    others = exchanges(samples, lambda pair: pair in controls)
    if not others.count:
        others = exchanges(first_samples, lambda pair: node not in pair)
    result = permutation_test(mine, others, settings.alpha)
    second = {"stall_pct": round(mine.stall_pct, 2), "lost_ms": round(float(mine.lost_s.sum()) * 1e3, 3),
              "slower_pct": round(mine.lost_pct, 2), "p": None if result is None else p_rounded(result.p)}
    confirmed = result is not None and result.p < settings.alpha and mine.lost_pct >= settings.threshold_pct
    return {**entry, "second_pass": second}, confirmed


def _settle(final: Diagnosis, node: str, record: dict, confirmed: bool) -> None:
    if confirmed:
        final.suspect_nodes.setdefault(node, []).append(record)
    else:
        final.cleared.append({"node": node, **record})
