"""Naming the slow node or the bad link from pair measurements (`commbench hunt`): plain Python, no torch.

Every figure is turned into "percent slower" than a reference, in time: a bandwidth b against reference B is
B/b − 1, a latency l against L is l/L − 1. A node slowed by 100 % halves its bandwidth and doubles its latency; both
read 100 % slower.

The reference is the allocation's own healthy figure unless a baseline gives it. Not the median of all pairs: with 4
nodes and one slow node, 3 of the 6 pairs are slow and the median is half slow. Instead each node gets a score, the
better middle value of its pairs (one slow partner out of three, or of two, does not move it), and the reference is
the better middle of the node scores (true while at most half the nodes are slow). The spread is the median absolute
deviation scaled to a standard deviation (1.4826 · MAD), floored at SPREAD_FLOOR_PCT so that a very quiet allocation
does not turn a 1 % wobble into a large z-score.

A node is suspect when its score is slower than the reference by at least the threshold, with a z-score of at least
min_z, and it is slow with most of its partners. A link is suspect when its pair is that slow, neither end is a
suspect node, and each end is fine with at least half of its other partners (the triangle: 1↔2 slow while 1↔3 and
2↔4 are fine is the fabric between 1 and 2, not either node). Every suspect is then measured again against
known-good nodes (confirm()) before it is named.

The figures alone do not name a node: its slowdown must also stand out from the run's own noise. The samples of its
pairs (every exchange) must be slower than the other pairs' by a one-sided Mann–Whitney U test at alpha divided by
the number of nodes tested (Bonferroni), and a link's samples likewise against every other pair's, divided by the
number of pairs. A third test, stalls (commbench/cluster/stalls.py), names a node whose pairs lose time to
exchanges far slower than their median. Each test reports detectable_pct: the smallest slowdown this run could have
named, from its threshold and its noise.

The second pass is judged against itself, not against the first pass: each of its rounds is filled with control
pairs of known-good nodes, so that it runs under the same load as a first-pass round (on one shared host a pair
measured alone ran twice as fast as in a full round), and its reference is the controls' better middle.
"""

import math
from dataclasses import dataclass, field

from commbench.cluster.pairing import disjoint_rounds
from commbench.cluster.stalls import Exchanges, permutation_test

SPREAD_FLOOR_PCT = 2.0
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class PairMetric:
    name: str
    column: str
    unit: str
    higher_is_better: bool


BANDWIDTH = PairMetric("bandwidth", "busbw_gbps", "GB/s", True)
STALLS = "stalls"
LATENCY = PairMetric("latency", "latency_us", "us", False)
INTRA = PairMetric("intra_all_reduce", "busbw_gbps", "GB/s", True)
PAIR_METRICS = (BANDWIDTH, LATENCY)


@dataclass(frozen=True)
class Settings:
    threshold_pct: float
    """How much slower than the reference a figure must be to count as slow."""
    min_z: float
    """How far outside the allocation's spread (robust z-score) it must also be."""
    alpha: float = 0.01
    """Significance of the rank and stall tests, before the correction for the number of nodes or pairs tested."""
    stall_factor: float = 3.0
    """An exchange slower than this many times its pair's median is a stall."""
    statistic: str = "median"
    """Each measurement's figure from its samples: median or p10."""


@dataclass
class Diagnosis:
    references: dict[str, float] = field(default_factory=dict)
    """Per metric name, the figure everything is compared with."""
    reference_source: str = "allocation"
    suspect_nodes: dict[str, list[dict]] = field(default_factory=dict)
    """Node → its evidence, one entry per test that flagged it."""
    suspect_links: dict[tuple[str, str], list[dict]] = field(default_factory=dict)
    second_references: dict[str, float] = field(default_factory=dict)
    """Per metric name, what the second pass was judged against."""
    cleared: list[dict] = field(default_factory=list)
    """Suspects of the first pass that the second pass did not confirm, with both passes' figures."""
    notes: list[str] = field(default_factory=list)
    detectable: dict[str, float] = field(default_factory=dict)
    """Per test, the smallest slowdown (percent) this run could have named: its threshold, or its noise's."""
    noise_bar: dict[str, float] = field(default_factory=dict)
    """Per test, the slowdown (percent) a pair must reach beyond its repeats' noise: max(threshold, min_z · the
    repeat noise); links and second-pass figures are held to it."""

    def bar(self, test: str, threshold: float) -> float:
        return max(threshold, self.noise_bar.get(test, threshold))


Samples = dict[str, dict[tuple[str, str], list[float]]]
"""Per test (bandwidth, latency), each pair's exchange times in seconds."""


def rank_p(mine: list[float], others: list[float]) -> float | None:
    """One-sided Mann–Whitney U: are `mine` (times) larger than `others`? None without enough of either."""
    from scipy.stats import mannwhitneyu  # here, not at the top: `commbench --help` must not import scipy

    if len(mine) < 3 or len(others) < 3:
        return None
    return float(mannwhitneyu(mine, others, alternative="greater").pvalue)


def _figure(times: list[float], statistic: str) -> float:
    ordered = sorted(times)
    if statistic == "p10":  # numpy's linear percentile
        position = 0.1 * (len(ordered) - 1)
        low = int(position)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
    return _median(ordered)


def repeat_noise_pct(repeats: list[Samples], test: str, statistic: str) -> float | None:
    """How much one pair's figure moves between its repeats, as a robust standard deviation in percent (1.4826 ·
    the median absolute deviation of the log ratios of its repeats, over √2 for the two measurements in each)."""
    if len(repeats) < 2:
        return None
    logs = []
    for pair, first in repeats[0].get(test, {}).items():
        second = repeats[1].get(test, {}).get(pair)
        if first and second:
            logs.append(math.log(_figure(second, statistic) / _figure(first, statistic)))
    if len(logs) < 2:
        return None
    middle = _median(sorted(logs))
    return 100 * MAD_TO_SIGMA * _median(sorted(abs(value - middle) for value in logs)) / math.sqrt(2)


def repeat_slowdowns(node: str, test: str, repeats: list[Samples], statistic: str,
                     among: set[tuple[str, str]] | None = None) -> list[float]:
    """The node's percent slower in each repeat on its own: its middle pair time against that repeat's middle node
    score (among: only these pairs count as the node's)."""
    found = []
    for repeat in repeats:
        times = {pair: _figure(values, statistic) for pair, values in repeat.get(test, {}).items() if values}
        nodes = {end for pair in times for end in pair}
        scores = {name: better_middle([value for pair, value in times.items() if name in pair],
                                      higher_is_better=False) for name in nodes}
        mine = [value for pair, value in times.items() if node in pair and (among is None or pair in among)]
        others = [score for name, score in scores.items() if name != node]
        if mine and others:
            reference = better_middle(others, higher_is_better=False)
            found.append((better_middle(mine, higher_is_better=False) / reference - 1) * 100)
    return found


def pair_repeat_slowdowns(pair: tuple[str, str], test: str, repeats: list[Samples], statistic: str,
                          controls: set[tuple[str, str]]) -> list[float]:
    """A pair's percent slower in each repeat on its own, against that repeat's control pairs' better middle."""
    found = []
    for repeat in repeats:
        measured = repeat.get(test, {})
        mine = measured.get(pair) or measured.get((pair[1], pair[0]))
        references = [_figure(values, statistic) for other, values in measured.items() if other in controls and values]
        if mine and references:
            found.append((_figure(mine, statistic) / better_middle(references, higher_is_better=False) - 1) * 100)
    return found


def _pooled(samples: dict[tuple[str, str], list[float]], pairs) -> list[float]:
    return [value for pair in pairs for value in samples.get(pair, ())]


def slower_pct(value: float, reference: float, *, higher_is_better: bool) -> float:
    """How much longer the same work takes at `value` than at `reference`, in percent (negative: faster)."""
    return (reference / value - 1) * 100 if higher_is_better else (value / reference - 1) * 100


def better_middle(values: list[float], *, higher_is_better: bool) -> float:
    """The median, or with an even count the better of the two middle values."""
    ordered = sorted(values, reverse=higher_is_better)
    return ordered[(len(ordered) - 1) // 2]


def robust_spread(values: list[float]) -> float:
    if not values:
        return SPREAD_FLOOR_PCT
    ordered = sorted(values)
    middle = _median(ordered)
    return max(SPREAD_FLOOR_PCT, MAD_TO_SIGMA * _median(sorted(abs(value - middle) for value in ordered)))


def _median(ordered: list[float]) -> float:
    count = len(ordered)
    return (ordered[(count - 1) // 2] + ordered[count // 2]) / 2


def _partners(pairs: dict[tuple[str, str], float], node: str) -> dict[str, float]:
    return {b if a == node else a: value for (a, b), value in pairs.items() if node in (a, b)}


def diagnose(nodes: list[str], pairs: dict[tuple[str, str], dict[str, float]], intra: dict[str, float],
             settings: Settings, baseline: dict[str, float] | None = None, samples: Samples | None = None,
             repeats: list[Samples] | None = None) -> Diagnosis:
    """The first pass: suspects from every pair's figures (pairs[(a, b)][metric column]), their samples (the rank
    and stall tests; without them the figures decide alone) and each node's intra-node all_reduce bandwidth (intra;
    nodes with one rank have none)."""
    samples = samples or {}
    diagnosis = Diagnosis(reference_source="baseline" if baseline else "allocation")
    if len(nodes) == 2 and pairs and not baseline:
        diagnosis.notes.append("2 nodes: one pair has nothing to be compared with; give --baseline to judge it")
    measured = {}
    for metric in PAIR_METRICS:
        values = {pair: figures[metric.column] for pair, figures in pairs.items()
                  if figures.get(metric.column) is not None}
        if values:
            measured[metric] = _node_suspects(diagnosis, nodes, values, metric, settings, baseline,
                                              samples.get(metric.name, {}), repeats or [])
    _stall_suspects(diagnosis, nodes, samples, settings)
    if intra:
        _diagnose_intra(diagnosis, intra, settings, baseline)
    named = set(diagnosis.suspect_nodes)
    for metric, (values, slow, partners) in measured.items():
        _link_suspects(diagnosis, values, slow, partners, metric, settings, named, samples.get(metric.name, {}))
    return diagnosis


def _reference(diagnosis, name, scores: list[float], metric: PairMetric, baseline) -> float:
    reference = (baseline or {}).get(name) or better_middle(scores, higher_is_better=metric.higher_is_better)
    diagnosis.references[name] = reference
    return reference


def _node_suspects(diagnosis: Diagnosis, nodes: list[str], values: dict[tuple[str, str], float],
                   metric: PairMetric, settings: Settings, baseline, samples: dict[tuple[str, str], list[float]],
                   repeats: list[Samples]):
    """Nodes slow with most partners; returns what the link test needs: (values, percent slower by pair, each
    node's partners)."""
    up = metric.higher_is_better
    partners = {node: _partners(values, node) for node in nodes}
    scores = {node: better_middle(list(found.values()), higher_is_better=up)
              for node, found in partners.items() if found}
    reference = _reference(diagnosis, metric.name, list(scores.values()), metric, baseline)
    slow = {pair: slower_pct(value, reference, higher_is_better=up) for pair, value in values.items()}
    node_slow = {node: slower_pct(score, reference, higher_is_better=up) for node, score in scores.items()}
    node_spread = robust_spread(list(node_slow.values()))
    threshold = settings.threshold_pct
    noise = repeat_noise_pct(repeats, metric.name, settings.statistic)
    detectable = max(threshold, settings.min_z * node_spread, settings.min_z * (noise or 0.0))
    diagnosis.detectable[metric.name] = detectable
    bar = diagnosis.noise_bar[metric.name] = max(threshold, settings.min_z * (noise or 0.0))
    tested = max(1, len(scores))
    for node, slower in node_slow.items():
        # slow with a partner: beyond the noise bar, as the node itself must be (the threshold alone is within the
        # noise on a busy host, where a node's healthy pairs would then count as slow too)
        slow_with = sorted(peer for peer in partners[node] if slow[_key(node, peer, values)] >= bar)
        z = slower / node_spread
        if not (len(partners[node]) >= 2 and slower >= detectable and z >= settings.min_z
                and len(slow_with) * 2 > len(partners[node])):
            continue
        each = [] if baseline else repeat_slowdowns(node, metric.name, repeats, settings.statistic)
        if any(value < threshold for value in each):
            continue  # slow in one measurement of its pairs, not in the other: the host, not the node
        mine = [pair for pair in values if node in pair]
        p = None if baseline else rank_p(_pooled(samples, mine), _pooled(samples, set(values) - set(mine)))
        if p is not None and p >= settings.alpha / tested:
            continue  # slow by its figures, but its exchanges do not stand out from the others' (noise)
        diagnosis.suspect_nodes.setdefault(node, []).append(_evidence(
            metric, scores[node], reference, slower, z, slow_with=slow_with,
            fine_with=sorted(set(partners[node]) - set(slow_with)), p=_p(p), tested=tested,
            repeats_slower_pct=[round(value, 2) for value in each], noise_pct=_rounded(noise)))
    return values, slow, partners


def _p(p: float | None) -> float | None:
    return None if p is None else float(f"{p:.3g}")


def _stall_suspects(diagnosis: Diagnosis, nodes: list[str], samples: Samples, settings: Settings) -> None:
    """Nodes whose pairs lose time to stalls: significantly more than the other pairs' exchanges (a permutation test
    at alpha / nodes tested), at least --threshold of their time, and with most of their partners."""
    stalls = {pair: Exchanges.pooled(parts) for pair, parts in _exchanges_by_pair(samples, settings).items()}
    tested = [node for node in nodes if sum(node in pair for pair in stalls) >= 2]
    if not tested or len(stalls) < 3:
        return
    threshold = settings.threshold_pct
    alpha = settings.alpha / len(tested)
    detectable = []
    for node in tested:
        mine = [pair for pair in stalls if node in pair]
        found = Exchanges.pooled([stalls[pair] for pair in mine])
        result = permutation_test(found, Exchanges.pooled([stalls[pair] for pair in stalls if node not in pair]),
                                  alpha)
        if result is None:
            continue
        detectable.append(result.detectable_pct)
        partners = {b if a == node else a: stalls[(a, b)].lost_pct for a, b in mine}
        slow_with = sorted(peer for peer, lost in partners.items() if lost >= threshold)
        if found.lost_pct >= threshold and result.p < alpha and len(slow_with) * 2 > len(partners):
            diagnosis.suspect_nodes.setdefault(node, []).append(_stall_evidence(
                found, result.p, slow_with=slow_with, fine_with=sorted(set(partners) - set(slow_with)),
                tested=len(tested)))
    if detectable:
        diagnosis.detectable[STALLS] = max(threshold, sorted(detectable)[(len(detectable) - 1) // 2])


def _exchanges_by_pair(samples: Samples, settings: Settings) -> dict[tuple[str, str], list[Exchanges]]:
    """Each pair's exchanges of every test, a stall judged against the pair's median bandwidth exchange."""
    scales = {pair: _median(sorted(times)) for pair, times in samples.get(BANDWIDTH.name, {}).items() if times}
    by_pair: dict[tuple[str, str], list[Exchanges]] = {}
    for per_pair in samples.values():
        for pair, times in per_pair.items():
            by_pair.setdefault(pair, []).append(Exchanges.of(times, settings.stall_factor, scales.get(pair)))
    return by_pair


def _stall_evidence(found: Exchanges, p: float, **more) -> dict:
    return {"test": STALLS, "stall_pct": round(found.stall_pct, 2), "stalls": found.stalls,
            "exchanges": found.count, "lost_ms": round(float(found.lost_s.sum()) * 1e3, 3),
            "slower_pct": round(found.lost_pct, 2), "p": _p(p), **more}


def _link_suspects(diagnosis: Diagnosis, values, slow, partners, metric: PairMetric, settings: Settings,
                   named: set[str], samples: dict[tuple[str, str], list[float]]) -> None:
    """Slow pairs whose ends are both fine with at least half of their other partners in this test. An end named as
    a node by another test does not stop it: the second pass settles which it is (confirm() drops a link whose end
    it names), and a node the second pass clears must not hide a real link."""
    threshold = settings.threshold_pct
    bar = diagnosis.bar(metric.name, threshold)
    pair_spread = robust_spread([value for pair, value in slow.items() if not named & set(pair)])
    for pair, slower in slow.items():
        z = slower / pair_spread
        if slower < bar or z < settings.min_z:
            continue
        ends_fine = {}
        for end in pair:
            others = [slow[_key(end, peer, values)] for peer in partners[end] if peer not in pair]
            ends_fine[end] = None if not others else sum(other < bar for other in others) * 2 >= len(others)
        if any(fine is False for fine in ends_fine.values()):
            continue  # an end slow with most others too but not named (e.g. a noisy node): no triangle to stand on
        p = rank_p(samples.get(pair, []), _pooled(samples, [other for other in values if other != pair]))
        if p is not None and p >= settings.alpha / len(values):
            continue  # its exchanges do not stand out from the other pairs' (corrected for the pairs tested)
        evidence = _evidence(metric, values[pair], diagnosis.references[metric.name], slower, z, p=_p(p),
                             tested=len(values))
        evidence["ends_fine_elsewhere"] = {end: fine for end, fine in ends_fine.items()}
        if any(fine is None for fine in ends_fine.values()):
            evidence["note"] = "an end has no other partner: a slow node cannot be told from a slow link"
        diagnosis.suspect_links.setdefault(pair, []).append(evidence)


def _diagnose_intra(diagnosis: Diagnosis, intra: dict[str, float], settings: Settings, baseline) -> None:
    reference = _reference(diagnosis, INTRA.name, list(intra.values()), INTRA, baseline)
    slow = {node: slower_pct(value, reference, higher_is_better=True) for node, value in intra.items()}
    spread = robust_spread(list(slow.values()))
    if len(intra) < 3 and not baseline:  # two nodes' figures cannot say which of them is the slow one
        return
    for node, slower in slow.items():
        z = slower / spread
        if slower >= settings.threshold_pct and z >= settings.min_z:
            evidence = _evidence(INTRA, intra[node], reference, slower, z)
            evidence["peers"] = sorted(peer for peer in intra if peer != node)
            diagnosis.suspect_nodes.setdefault(node, []).append(evidence)


def _key(a: str, b: str, values: dict) -> tuple[str, str]:
    return (a, b) if (a, b) in values else (b, a)


def _evidence(metric: PairMetric, value: float, reference: float, slower: float, z: float, **more) -> dict:
    return {"test": metric.name, "value": round(value, 6), "unit": metric.unit, "reference": round(reference, 6),
            "slower_pct": round(slower, 2), "z": round(z, 2), **more}


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
        pair = tuple(sorted((a, b), key=order.get))
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
    intra-node test); the first pass's reference where it has none, or where a baseline gives the reference."""
    references = dict(first.references)
    if first.reference_source == "baseline":
        return references
    for metric in PAIR_METRICS:
        values = [figures[metric.column] for figures in controls.values() if figures.get(metric.column) is not None]
        if values and metric.name in references:
            references[metric.name] = better_middle(values, higher_is_better=metric.higher_is_better)
    if second_intra and INTRA.name in references:
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
    final = Diagnosis(references=dict(first.references), reference_source=first.reference_source,
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
                second = {"value": value, "slower_pct": _rounded(slower)}
                confirmed = slower is not None and slower >= threshold
            else:
                paired = {b if a == node else a: again((a, b), metric) for a, b in second_pairs if node in (a, b)}
                second = {peer: _rounded(slower) for peer, slower in paired.items()}
                # the verdict rests on its known-good partners: a suspect link's other end (measured again as the
                # link) is slow with it by that link, whatever the node
                repaired = {peer: slower for peer, slower in paired.items() if peer not in suspects} or paired
                bar = first.bar(metric.name, threshold)
                slow_again = [slower for slower in repaired.values() if slower is not None and slower >= bar]
                confirmed = bool(repaired) and len(slow_again) * 2 > len(repaired)
                measured = samples.get(metric.name, {})
                p = rank_p(_pooled(measured, [pair for pair in measured if node in pair and (set(pair) - {node})
                                              <= set(repaired)]), _pooled(measured, control_pairs))
                if p is not None:
                    second["p"] = _p(p)
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
            second = {"link": _rounded(link_again),
                      **{f"{end} with": {peer: _rounded(value) for peer, value in found.items()}
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
    def exchanges(measured: Samples, wanted) -> Exchanges:
        return Exchanges.pooled([part for pair, parts in _exchanges_by_pair(measured, settings).items()
                                 if wanted(pair) for part in parts])

    mine = exchanges(samples, lambda pair: node in pair and not (set(pair) - {node}) & suspects)
    if not mine.count:  # no known-good partner left: its re-pairs with the other suspects
        mine = exchanges(samples, lambda pair: node in pair)
    others = exchanges(samples, lambda pair: pair in controls)
    if not others.count:
        others = exchanges(first_samples, lambda pair: node not in pair)
    result = permutation_test(mine, others, settings.alpha)
    second = {"stall_pct": round(mine.stall_pct, 2), "lost_ms": round(float(mine.lost_s.sum()) * 1e3, 3),
              "slower_pct": round(mine.lost_pct, 2), "p": None if result is None else _p(result.p)}
    confirmed = result is not None and result.p < settings.alpha and mine.lost_pct >= settings.threshold_pct
    return {**entry, "second_pass": second}, confirmed


def _settle(final: Diagnosis, node: str, record: dict, confirmed: bool) -> None:
    if confirmed:
        final.suspect_nodes.setdefault(node, []).append(record)
    else:
        final.cleared.append({"node": node, **record})


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
