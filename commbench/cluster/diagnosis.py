"""hunt's first pass: suspect nodes and links from pair measurements (`commbench hunt`): plain Python, no torch. The
second pass, which confirms them, is confirmation.py; the statistics both use are pair_statistics.py.

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
known-good nodes (confirmation.confirm) before it is named.

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

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.cluster.pair_statistics import (
    Samples,
    better_middle,
    median,
    p_rounded,
    pooled,
    rank_p,
    repeat_noise_pct,
    repeat_slowdowns,
    robust_spread,
    rounded,
    slower_pct,
)
from commbench.cluster.specs import Statistic

if TYPE_CHECKING:  # numpy comes with stalls: imported where a hunt judges, not when the CLI lists its commands
    from commbench.cluster.stalls import Exchanges


Pair = tuple[str, str]
"""Two nodes, as the rows name them (node_a, node_b)."""
PairFigures = tuple[dict[Pair, float], dict[Pair, float], dict[str, dict[str, float]]]
"""What the link test needs of a metric's node test: each pair's figure, each pair's percent slower than the
reference, each node's partners with their figures."""


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
BASELINE, ALLOCATION = "baseline", "allocation"
"""Where a reference comes from: --baseline's figure, or the allocation's own (the better middle of its node
scores)."""


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
    statistic: Statistic = "median"
    """Each measurement's figure from its samples: median or p10."""


@dataclass
class Diagnosis:
    references: dict[str, float] = field(default_factory=dict)
    """Per metric name, the figure everything is compared with."""
    reference_sources: dict[str, str] = field(default_factory=dict)
    """Per metric name, where its reference came from: BASELINE or ALLOCATION (a --baseline without that figure
    leaves the metric to the allocation)."""
    reference_source: str = ALLOCATION
    """All the references' source in a word (BASELINE, ALLOCATION), or which metric came from which
    (sources_text)."""
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

    def from_baseline(self, name: str) -> bool:
        """Whether metric `name` is judged against --baseline's figure (not the allocation's own)."""
        return self.reference_sources.get(name) == BASELINE


def sources_text(sources: dict[str, str]) -> str:
    """"baseline" or "allocation" where every reference has one source; else which metrics came from each, e.g.
    "baseline for bandwidth; allocation for latency"."""
    kinds = set(sources.values())
    if len(kinds) == 1:
        return kinds.pop()
    return "; ".join(f"{source} for {', '.join(name for name, found in sources.items() if found == source)}"
                     for source in (BASELINE, ALLOCATION))


def _partners(pairs: dict[tuple[str, str], float], node: str) -> dict[str, float]:
    return {b if a == node else a: value for (a, b), value in pairs.items() if node in (a, b)}


def diagnose(nodes: list[str], pairs: dict[tuple[str, str], dict[str, float]], intra: dict[str, float],
             settings: Settings, baseline: dict[str, float] | None = None, samples: Samples | None = None,
             repeats: list[Samples] | None = None) -> Diagnosis:
    """The first pass: suspects from every pair's figures (pairs[(a, b)][metric column]), their samples (the rank
    and stall tests; without them the figures decide alone) and each node's intra-node all_reduce bandwidth (intra;
    nodes with one rank have none)."""
    samples = samples or {}
    diagnosis = Diagnosis(reference_source=BASELINE if baseline else ALLOCATION)
    if len(nodes) == 2 and pairs and not baseline:
        diagnosis.notes.append("2 nodes: one pair has nothing to be compared with; give --baseline to judge it")
    measured: dict[PairMetric, PairFigures] = {}
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


def _reference(diagnosis: Diagnosis, name: str, scores: list[float], metric: PairMetric,
               baseline: dict[str, float] | None) -> float:
    """--baseline's figure for this metric, else the allocation's own; a baseline without it says so in a note (the
    metric is then judged as without --baseline)."""
    given = (baseline or {}).get(name)
    if given is not None:
        reference, source = given, BASELINE
    else:
        reference, source = better_middle(scores, higher_is_better=metric.higher_is_better), ALLOCATION
        if baseline:
            diagnosis.notes.append(f"{name}: the baseline has no {name} figure; judged against the allocation's own "
                                   f"reference, the better middle of its node scores ({reference:.4g} {metric.unit}), "
                                   "as without --baseline")
    diagnosis.references[name] = reference
    diagnosis.reference_sources[name] = source
    diagnosis.reference_source = sources_text(diagnosis.reference_sources)
    return reference


def _node_suspects(diagnosis: Diagnosis, nodes: list[str], values: dict[tuple[str, str], float],
                   metric: PairMetric, settings: Settings, baseline: dict[str, float] | None,
                   samples: dict[tuple[str, str], list[float]], repeats: list[Samples]) -> PairFigures:
    """Nodes slow with most partners; returns what the link test needs: (values, percent slower by pair, each
    node's partners)."""
    up = metric.higher_is_better
    partners = {node: _partners(values, node) for node in nodes}
    scores = {node: better_middle(list(found.values()), higher_is_better=up)
              for node, found in partners.items() if found}
    reference = _reference(diagnosis, metric.name, list(scores.values()), metric, baseline)
    from_baseline = diagnosis.from_baseline(metric.name)
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
        each = [] if from_baseline else repeat_slowdowns(node, metric.name, repeats, settings.statistic)
        if any(value < threshold for value in each):
            continue  # slow in one measurement of its pairs, not in the other: the host, not the node
        mine = [pair for pair in values if node in pair]
        p = None if from_baseline else rank_p(pooled(samples, mine), pooled(samples, set(values) - set(mine)))
        if p is not None and p >= settings.alpha / tested:
            continue  # slow by its figures, but its exchanges do not stand out from the others' (noise)
        diagnosis.suspect_nodes.setdefault(node, []).append(_evidence(
            metric, scores[node], reference, slower, z, slow_with=slow_with,
            fine_with=sorted(set(partners[node]) - set(slow_with)), p=p_rounded(p), tested=tested,
            repeats_slower_pct=[round(value, 2) for value in each], noise_pct=rounded(noise)))
    return values, slow, partners


def _stall_suspects(diagnosis: Diagnosis, nodes: list[str], samples: Samples, settings: Settings) -> None:
    """Nodes whose pairs lose time to stalls: significantly more than the other pairs' exchanges (a permutation test
    at alpha / nodes tested), at least --threshold of their time, and with most of their partners."""
    from commbench.cluster.stalls import Exchanges, permutation_test

    stalls = {pair: Exchanges.pooled(parts) for pair, parts in exchanges_by_pair(samples, settings).items()}
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


def exchanges_by_pair(samples: Samples, settings: Settings) -> dict[tuple[str, str], list[Exchanges]]:
    """Each pair's exchanges of every test, a stall judged against the pair's median bandwidth exchange."""
    from commbench.cluster.stalls import Exchanges

    scales = {pair: median(sorted(times)) for pair, times in samples.get(BANDWIDTH.name, {}).items() if times}
    by_pair: dict[tuple[str, str], list[Exchanges]] = {}
    for per_pair in samples.values():
        for pair, times in per_pair.items():
            by_pair.setdefault(pair, []).append(Exchanges.of(times, settings.stall_factor, scales.get(pair)))
    return by_pair


def _stall_evidence(found: Exchanges, p: float, **more: object) -> dict:
    return {"test": STALLS, "stall_pct": round(found.stall_pct, 2), "stalls": found.stalls,
            "exchanges": found.count, "lost_ms": round(float(found.lost_s.sum()) * 1e3, 3),
            "slower_pct": round(found.lost_pct, 2), "p": p_rounded(p), **more}


def _link_suspects(diagnosis: Diagnosis, values: dict[Pair, float], slow: dict[Pair, float],
                   partners: dict[str, dict[str, float]], metric: PairMetric, settings: Settings,
                   named: set[str], samples: dict[tuple[str, str], list[float]]) -> None:
    """Slow pairs whose ends are both fine with at least half of their other partners not named as nodes (a named
    node's pairs are slow for its own reason) in this test. An end named as
    a node by another test does not stop it: the second pass settles which it is (confirmation.confirm drops a link
    whose end it names), and a node the second pass clears must not hide a real link."""
    threshold = settings.threshold_pct
    bar = diagnosis.bar(metric.name, threshold)
    # the pairs of the nodes not named are what a link is judged against: a named node's pairs are slow for its own
    # reason, and a link less slow than that node would hide among them
    unnamed = [pair for pair in slow if not named & set(pair)]
    pair_spread = robust_spread([slow[pair] for pair in unnamed])
    for pair, slower in slow.items():
        z = slower / pair_spread
        if slower < bar or z < settings.min_z:
            continue
        ends_fine = {}
        for end in pair:
            others = [slow[_key(end, peer, values)] for peer in partners[end] if peer not in pair and peer not in named]
            ends_fine[end] = None if not others else sum(other < bar for other in others) * 2 >= len(others)
        if any(fine is False for fine in ends_fine.values()):
            continue  # an end slow with most others too but not named (e.g. a noisy node): no triangle to stand on
        p = rank_p(samples.get(pair, []), pooled(samples, [other for other in unnamed if other != pair]))
        if p is not None and p >= settings.alpha / len(values):
            continue  # its exchanges do not stand out from the other pairs' (corrected for the pairs tested)
        evidence = _evidence(metric, values[pair], diagnosis.references[metric.name], slower, z, p=p_rounded(p),
                             tested=len(values))
        evidence["ends_fine_elsewhere"] = {end: fine for end, fine in ends_fine.items()}
        if any(fine is None for fine in ends_fine.values()):
            evidence["note"] = "an end has no other partner: a slow node cannot be told from a slow link"
        diagnosis.suspect_links.setdefault(pair, []).append(evidence)


def _diagnose_intra(diagnosis: Diagnosis, intra: dict[str, float], settings: Settings,
                    baseline: dict[str, float] | None) -> None:
    reference = _reference(diagnosis, INTRA.name, list(intra.values()), INTRA, baseline)
    slow = {node: slower_pct(value, reference, higher_is_better=True) for node, value in intra.items()}
    spread = robust_spread(list(slow.values()))
    if len(intra) < 3 and not diagnosis.from_baseline(INTRA.name):  # two nodes cannot say which is the slow one
        return
    for node, slower in slow.items():
        z = slower / spread
        if slower >= settings.threshold_pct and z >= settings.min_z:
            evidence = _evidence(INTRA, intra[node], reference, slower, z)
            evidence["peers"] = sorted(peer for peer in intra if peer != node)
            diagnosis.suspect_nodes.setdefault(node, []).append(evidence)


def _key(a: str, b: str, values: Mapping[Pair, object]) -> Pair:
    return (a, b) if (a, b) in values else (b, a)


def _evidence(metric: PairMetric, value: float, reference: float, slower: float, z: float, **more: object) -> dict:
    return {"test": metric.name, "value": round(value, 6), "unit": metric.unit, "reference": round(reference, 6),
            "slower_pct": round(slower, 2), "z": round(z, 2), **more}
