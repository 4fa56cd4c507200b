"""The whole of `commbench tune` short of printing and writing: runs → groups → per-size decisions and verdicts, each
group's fits and crossovers, and the plugin's lines."""

from dataclasses import dataclass
from pathlib import Path

from commbench.tune import crossovers, decisions, ranges, runs, verdicts


@dataclass
class GroupAnalysis:
    group: decisions.Group
    verdicts: list[verdicts.Verdict]
    """One per group.sizes entry, in its order."""
    fits: list[crossovers.EnvFit]
    crossovers: list[crossovers.Crossover]


@dataclass
class Analysis:
    runs: tuple[runs.TuneRun, ...]
    groups: list[GroupAnalysis]
    plan: ranges.Plan
    margin_pct: float
    any_topology: bool

    @property
    def beyond_noise_anywhere(self) -> bool:
        return any(decision.beyond_noise for analysed in self.groups for decision in analysed.group.sizes)


def analyse(paths: tuple[Path, ...], *, margin_pct: float, any_topology: bool) -> Analysis:
    loaded = runs.load(paths, any_topology=any_topology)
    analysed, judged = [], []
    for group in decisions.decide(loaded.rows, margin_pct):
        said = [verdicts.verdict(group, decision) for decision in group.sizes]
        judged += [(group, decision, verdict) for decision, verdict in zip(group.sizes, said)]
        fits = crossovers.fit_envs(group.usable_rows())
        sizes = [decision.size_bytes for decision in group.sizes]
        crossings = crossovers.crossovers(fits, min(sizes), max(sizes)) if sizes else []
        analysed.append(GroupAnalysis(group, said, fits, crossings))
    return Analysis(loaded.runs, analysed, ranges.plan(judged, any_topology=any_topology), margin_pct, any_topology)
