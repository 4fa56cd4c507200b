"""hunt's second pass: which pairs to measure again (confirm_plan), and which first-pass suspects they confirm
(confirm). Each suspect is re-paired with known-good nodes, every round topped up with control pairs of known-good
nodes so that it runs under the load of a first-pass round, and judged against those controls: the noise bar, the
rank test, most repeats, and for stalls the permutation test again."""

from __future__ import annotations

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


def _with_controls(rounds: list[list[tuple[str, str]]], good: list[str]):
    """Each round topped up with pairs of idle known-good nodes; one control round more if none fit."""
    controls = []
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


def confirm(first: Diagnosis, second_pairs: dict[tuple[str, str], dict[str, float]],
            second_intra: dict[str, float], settings: Settings,
            controls: dict[tuple[str, str], dict[str, float]] | None = None,
            samples: Samples | None = None, first_samples: Samples | None = None,
            repeats: list[Samples] | None = None) -> Diagnosis:
    """The named suspects: those of the first pass that the second pass measured slow again against its own
    reference (second_references), with its samples (every repeat of each re-pair, pooled) slower than the control
    pairs' by the rank test, or (stalls) losing significantly more time to stalls than the controls. A link
    measured slow again with one end also slow against a good node names that end."""
    final = Diagnosis(references=dict(first.references), reference_sources=dict(first.reference_sources),
                      reference_source=first.reference_source,
                      notes=list(first.notes), detectable=dict(first.detectable), noise_bar=dict(first.noise_bar))
    samples = samples or {}
    control_pairs = set(controls or {})
    final.second_references = second_references(first, controls or {}, second_intra)
    threshold = settings.threshold_pct
    metrics = {metric.name: metric for metric in (*PAIR_METRICS, INTRA)}

    def again(pair: tuple[str, str], metric: PairMetric) -> float | None:
        figures = second_pairs.get(pair) or second_pairs.get((pair[1], pair[0]))
        value = figures.get(metric.column) if figures else None
        if value is None:
            return None
        return slower_pct(value, final.second_references[metric.name], higher_is_better=metric.higher_is_better)

    suspects = set(first.suspect_nodes) | {end for link in first.suspect_links for end in link}
    for node, evidence in first.suspect_nodes.items():
        for entry in evidence:
            if entry["test"] == STALLS:
                _settle(final, node, *_stalls_again(node, entry, samples, first_samples or {}, control_pairs,
                                                    suspects, settings))
                continue
            metric = metrics[entry["test"]]
            if metric is INTRA:
                value = second_intra.get(node)
                slower = None if value is None else slower_pct(value, final.second_references[INTRA.name],
                                                              higher_is_better=True)
                second: dict[str, object] = {"value": value, "slower_pct": rounded(slower)}
                confirmed = slower is not None and slower >= threshold
            else:
                paired = {b if a == node else a: again((a, b), metric) for a, b in second_pairs if node in (a, b)}
                second = {peer: rounded(slower) for peer, slower in paired.items()}
                # the verdict rests on its known-good partners: a suspect link's other end (measured again as the
                # link) is slow with it by that link, whatever the node
                repaired = {peer: slower for peer, slower in paired.items() if peer not in suspects} or paired
                bar = first.bar(metric.name, threshold)
                slow_again = [slower for slower in repaired.values() if slower is not None and slower >= bar]
                confirmed = bool(repaired) and len(slow_again) * 2 > len(repaired)
                measured = samples.get(metric.name, {})
                p = rank_p(pooled(measured, [pair for pair in measured if node in pair and (set(pair) - {node})
                                              <= set(repaired)]), pooled(measured, control_pairs))
                if p is not None:
                    second["p"] = p_rounded(p)
                    confirmed = confirmed and p < settings.alpha
                among = {pair for pair in measured if node in pair and (set(pair) - {node}) <= set(repaired)}
                each = repeat_slowdowns(node, metric.name, repeats or [], settings.statistic, among=among)
                if each:  # slow in most repeats, not in their pool only: one lucky (or unlucky) repeat decides nothing
                    second["repeats_slower_pct"] = [round(value, 2) for value in each]
                    confirmed = confirmed and sum(value >= threshold for value in each) * 2 > len(each)
            _settle(final, node, {**entry, "second_pass": second}, confirmed)
    for link, evidence in first.suspect_links.items():
        for entry in evidence:
            metric = metrics[entry["test"]]
            link_again = again(link, metric)
            with_good = {end: {b if a == end else a: again((a, b), metric)
                               for a, b in second_pairs if end in (a, b) and set((a, b)) != set(link)}
                         for end in link}
            second = {"link": rounded(link_again),
                      **{f"{end} with": {peer: rounded(value) for peer, value in found.items()}
                         for end, found in with_good.items()}}
            bar = first.bar(metric.name, threshold)
            each = pair_repeat_slowdowns(link, metric.name, repeats or [], settings.statistic, control_pairs)
            if each:
                second["repeats_slower_pct"] = [round(value, 2) for value in each]
            record = {**entry, "second_pass": second}
            if (link_again is None or link_again < bar
                    or (each and sum(value >= bar for value in each) * 2 <= len(each))):
                final.cleared.append({"link": list(link), **record})
                continue
            # an end is slow too when it is about as slow with known-good nodes as over the link (at least half the
            # link's slowdown): a slow node slows all its pairs alike, a bad link only its own
            end_bar = max(bar, link_again / 2)
            slow_ends = [end for end, found in with_good.items()
                         if found and all(value is not None and value >= end_bar for value in found.values())]
            if len(slow_ends) == 1:
                node = slow_ends[0]
                final.suspect_nodes.setdefault(node, []).append(
                    {**record, "note": f"the link {link[0]}–{link[1]} was slow again and {node} was slow with a "
                                       "known-good node too: the node, not the link"})
            elif slow_ends:
                final.cleared.append({"link": list(link), **record,
                                      "note": "both ends were slow with known-good nodes too: not this link"})
            else:
                final.suspect_links.setdefault(link, []).append(record)
    for link in [link for link in final.suspect_links if set(link) & set(final.suspect_nodes)]:
        for record in final.suspect_links.pop(link):  # a named node explains its slow pairs
            final.cleared.append({"link": list(link), **record, "note": "explained by a suspect node at its end"})
    return final


def _stalls_again(node: str, entry: dict, samples: Samples, first_samples: Samples, controls: set, suspects: set,
                  settings: Settings) -> tuple[dict, bool]:
    """The stall test again: the node's re-pairs with known-good nodes (every repeat) against the control pairs, or
    where the second pass had none (too few known-good nodes), against the first pass's pairs without the node."""
    from commbench.cluster.stalls import Exchanges, permutation_test

    def exchanges(measured: Samples, wanted) -> Exchanges:
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
