"""What `commbench tune` says: the table of each group's best setting per size range (margin, beyond noise or not,
the line it earns), its fits and crossovers, the lines and why the other sizes have none; the same as one --json
document; and the comments the config file carries."""

from collections import defaultdict
from pathlib import Path

from commbench.tune.analysis import Analysis, GroupAnalysis
from commbench.tune.config_file import FIELDS
from commbench.tune.decisions import ALONE, CI_RULE, SizeDecision
from commbench.tune.plugin import plugin_name
from commbench.tune.ranges import ANY, CHANNELS, Plan, Topology, topology_of
from commbench.tune.verdicts import Verdict
from commbench.units import format_bytes, readable

DEFAULT_NAME = "(default)"
"""How the environment the run was started in (env "") is shown."""


def env_name(env: str) -> str:
    return env or DEFAULT_NAME


def rule_text(margin_pct: float) -> str:
    return (f"the fastest setting wins beyond noise when its 95 % CI lies wholly below every other's, or, where a "
            f"row has no CI (imports), when it is faster by more than {margin_pct:g} %")


def topology_text(topology: Topology) -> str:
    if topology.n_ranks == ANY:
        return f"{topology.collective}, any topology"
    return f"{topology.collective}, {topology.n_ranks} ranks on {topology.n_nodes} node(s)"


def table_lines(analysis: Analysis) -> list[str]:
    envs = sorted({env for analysed in analysis.groups for env in analysed.group.envs})
    out = [f"# commbench tune: {len(analysis.runs)} run(s), {len(envs)} environments: "
           f"{' | '.join(map(env_name, envs))}",
           f"# {rule_text(analysis.margin_pct)}; margin = second-best time / best time - 1"]
    for run in analysis.runs:
        nodes = f" on {run.nodes} node(s)" if run.nodes is not None else " (hosts not recorded)"
        out.append(f"# run {run.path}: {run.source}, {'/'.join(map(str, run.world_sizes))} ranks{nodes}, env "
                   f"{' | '.join(map(env_name, run.envs))}")
    for analysed in analysis.groups:
        out += [""] + _group_lines(analysed)
    out += [""] + plan_lines(analysis)
    return out


def _group_lines(analysed: GroupAnalysis) -> list[str]:
    group = analysed.group
    out = [f"# {group.label()}: {len(group.envs)} environment(s)"]
    out += [f"#   note: {note}" for note in group.notes]
    left_out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for decision in group.sizes:
        for skipped in decision.skipped:
            left_out[(skipped.env, skipped.why)].append(decision.size_bytes)
    out += [f"#   left out: {env_name(env)} at {', '.join(map(format_bytes, sizes))}: {why}"
            for (env, why), sizes in left_out.items()]
    for fit in analysed.fits:
        note = f"; {fit.note}" if fit.note else ""
        out.append(f"#   α–β fit {env_name(fit.env)}: α {fit.alpha_us:.1f} us, algbw {fit.algbw_gbps:.4g} GB/s, "
                   f"R² {fit.r2:.3f} over {fit.n_points} sizes{note}")
    for crossing in analysed.crossovers:
        where = "inside" if crossing.inside else "near"
        out.append(f"#   fitted crossover at {readable(crossing.size_bytes)} ({where} the measured sizes): "
                   f"{env_name(crossing.faster_below)} faster below, {env_name(crossing.faster_above)} above")
    rows = [("sizes", "best env", "best time (us)", "margin (%)", "beyond noise", "choice")]
    for decisions, verdict in _runs_of_alike(analysed):
        rows.append((_span([format_bytes(decision.size_bytes) for decision in decisions]),
                     env_name(decisions[0].best.env) if decisions[0].best else "-",
                     _span([f"{decision.best.time_us:.2f}" for decision in decisions if decision.best]),
                     _low_high([decision.margin_pct for decision in decisions if decision.margin_pct is not None]),
                     _beyond(decisions[0]), verdict))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    out += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return out


def _runs_of_alike(analysed: GroupAnalysis) -> list[tuple[list[SizeDecision], str]]:
    """Adjacent sizes with the same best env, the same noise verdict and the same tuner line, merged."""
    merged: list[tuple[list[SizeDecision], str]] = []
    previous = None
    for decision, verdict in zip(analysed.group.sizes, analysed.verdicts):
        alike = (decision.best.env if decision.best else None, _beyond(decision), verdict.short)
        if merged and alike == previous:
            merged[-1][0].append(decision)
        else:
            merged.append(([decision], verdict.short))
        previous = alike
    return merged


def _span(values: list[str]) -> str:
    if not values:
        return ""
    return values[0] if len(values) == 1 or values[0] == values[-1] else f"{values[0]} - {values[-1]}"


def _low_high(values: list[float]) -> str:
    if not values:
        return "-"
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low} - {high}"


def _beyond(decision: SizeDecision) -> str:
    if decision.outcome == ALONE:
        return "-"
    rule = "CIs" if decision.rule == CI_RULE else "margin"
    return f"{'yes' if decision.beyond_noise else 'no'} ({rule})"


def plan_lines(analysis: Analysis) -> list[str]:
    plan = analysis.plan
    out = [f"# tuner lines ({FIELDS}):" if plan.lines else "# tuner lines: none"]
    for line in plan.lines:
        sizes = ", ".join(format_bytes(size) for size in line.sizes)
        out.append(line.text)
        out.append(f"#   covers the measured size(s) {sizes}")
        out += [f"#   note: {note}" for note in line.notes]
    out += [f"# no line: {text}" for text in no_line_summary(plan)]
    if not analysis.beyond_noise_anywhere:
        out.append("# nothing is beyond noise: no setting beats the others measurably at any size, so NCCL keeps "
                   "deciding everywhere")
    return out


def no_line_summary(plan: Plan) -> list[str]:
    """One entry per topology and reason: the sizes, adjacent measured sizes written as one span, and why."""
    by_reason: dict[tuple[Topology, str], list[int]] = defaultdict(list)
    for entry in plan.no_lines:
        by_reason[(entry.topology, entry.why)].append(entry.size_bytes)
    return [f"{topology_text(topology)}, {_spans(sizes, plan.sizes[topology])}: {why}"
            for (topology, why), sizes in by_reason.items()]


def _spans(sizes: list[int], measured: list[int]) -> str:
    """sizes as runs of adjacent measured sizes: "8-8192, 65536" (with a count where there is more than one)."""
    position = {size: index for index, size in enumerate(measured)}
    spans: list[list[int]] = []
    for size in sorted(sizes):
        if spans and position[size] == position[spans[-1][-1]] + 1:
            spans[-1].append(size)
        else:
            spans.append([size])
    text = ", ".join(format_bytes(span[0]) if len(span) == 1 else f"{format_bytes(span[0])}-{format_bytes(span[-1])}"
                     for span in spans)
    return text if len(sizes) == 1 else f"{text} ({len(sizes)} sizes)"


def file_header(analysis: Analysis, command: str) -> list[str]:
    """The comments above the lines: what wrote the file, from which runs, by which rules."""
    out = ["NCCL tuner config for NVIDIA's example tuner plugin (set NCCL_TUNER_CONFIG_FILE to this file), "
           "written by commbench tune", f"command: {command}"]
    for run in analysis.runs:
        nodes = f" on {run.nodes} node(s)" if run.nodes is not None else ""
        out.append(f"run {run.path}: {run.source}, {'/'.join(map(str, run.world_sizes))} ranks{nodes}, env "
                   f"{' | '.join(map(env_name, run.envs))}")
    out += [f"rule: {rule_text(analysis.margin_pct)}",
            "ranges: adjacent sizes with one choice merge; ends at geometric midpoints between measured sizes; no "
            "line where settings tie or NCCL's own choice wins"]
    for analysed in analysis.groups:
        for crossing in analysed.crossovers:
            out.append(f"fitted crossover {analysed.group.key['collective']} {analysed.group.variant()}: "
                       f"{env_name(crossing.faster_below)} faster below {readable(crossing.size_bytes)}, "
                       f"{env_name(crossing.faster_above)} above")
    return out


def file_footer(analysis: Analysis) -> list[str]:
    footer = [f"no line: {text}" for text in no_line_summary(analysis.plan)]
    if not analysis.plan.lines:
        footer.append("no line at all: NCCL decides everywhere (the plugin loads this file and changes nothing)")
    return footer


def document(analysis: Analysis, *, command: str, out: Path | None, written: bool) -> dict[str, object]:
    """The --json document: every group's decisions with their evidence, the lines, and the sizes without one."""
    return {
        "command": command, "margin_pct": analysis.margin_pct, "any_topology": analysis.any_topology,
        "rule": rule_text(analysis.margin_pct), "out": out if written else None, "fields": FIELDS.split(","),
        "runs": [{"path": run.path, "run_id": run.run_id, "source": run.source, "world_sizes": run.world_sizes,
                  "nodes": run.nodes, "envs": run.envs} for run in analysis.runs],
        "groups": [_group_document(analysed, analysis) for analysed in analysis.groups],
        "lines": [{"collective": plugin_name(line.topology.collective), "min_bytes": line.min_bytes,
                   "max_bytes": line.max_bytes, "algorithm": line.algorithm, "protocol": line.protocol,
                   "channels": CHANNELS,
                   "nNodes": line.topology.n_nodes, "nRanks": line.topology.n_ranks, "measured_sizes": line.sizes,
                   "notes": line.notes, "text": line.text} for line in analysis.plan.lines],
        "no_line": [{"collective": entry.topology.collective, "nNodes": entry.topology.n_nodes,
                     "nRanks": entry.topology.n_ranks, "size_bytes": entry.size_bytes, "why": entry.why}
                    for entry in analysis.plan.no_lines],
        "beyond_noise_anywhere": analysis.beyond_noise_anywhere,
    }


def _group_document(analysed: GroupAnalysis, analysis: Analysis) -> dict[str, object]:
    group = analysed.group
    topology = topology_of(group, analysis.any_topology)
    written = {size: line.text for line in analysis.plan.lines if line.topology == topology for size in line.sizes}
    left = {entry.size_bytes: entry.why for entry in analysis.plan.no_lines if entry.topology == topology}
    return {
        **group.key, "envs": group.envs, "notes": group.notes,
        "fits": [{"env": fit.env, "alpha_us": fit.alpha_us, "algbw_gbps": fit.algbw_gbps, "r2": fit.r2,
                  "n_points": fit.n_points, "note": fit.note} for fit in analysed.fits],
        "crossovers": [{"size_bytes": crossing.size_bytes, "faster_below": crossing.faster_below,
                        "faster_above": crossing.faster_above, "inside_measured_sizes": crossing.inside}
                       for crossing in analysed.crossovers],
        "decisions": [{**_decision_document(decision, verdict), "line": written.get(decision.size_bytes),
                       "why_no_line_in_file": left.get(decision.size_bytes)}
                      for decision, verdict in zip(group.sizes, analysed.verdicts)],
    }


def _decision_document(decision: SizeDecision, verdict: Verdict) -> dict[str, object]:
    ranked = decision.ranked
    return {
        "size_bytes": decision.size_bytes, "outcome": decision.outcome,
        "best_env": ranked[0].env if ranked else None, "second_env": ranked[1].env if len(ranked) > 1 else None,
        "margin_pct": decision.margin_pct, "beyond_noise": decision.beyond_noise, "rule": decision.rule,
        "candidates": [{"env": candidate.env, "run": candidate.run, "time_us_p50": candidate.time_us,
                        "time_us_ci_lo": candidate.ci_lo_us, "time_us_ci_hi": candidate.ci_hi_us}
                       for candidate in ranked],
        "skipped": [{"env": skipped.env, "run": skipped.run, "why": skipped.why} for skipped in decision.skipped],
        # what this group's measurement asks for; the file's lines are where every group of the topology agrees
        "choice": ({"algorithm": verdict.choice[0], "protocol": verdict.choice[1]} if verdict.choice else None),
        "why_no_line": verdict.why_no_line or None, "notes": verdict.notes,
    }
