"""`commbench hunt`'s rows and files: a row per measurement (intra-node all_reduce, pair bandwidth and latency, first
and second pass), a row per finding; hunt.json with the evidence; the node matrices as CSV. The diagnosis is always
computed from the rows, so the files and the rows cannot disagree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from commbench.cluster import diagnosis as judge
from commbench.cluster.confirmation import confirm
from commbench.cluster.gpu_health import FactsByNode, findings
from commbench.cluster.hostlist import compress
from commbench.cluster.matrix_files import matrix_csv, write_file
from commbench.cluster.nodes import Layout
from commbench.cluster.p2p_rows import timed_columns
from commbench.cluster.pair_statistics import Samples
from commbench.cluster.specs import HuntPhase, HuntSettings
from commbench.expect.rows import ACROSS_NODES, INTRA_ALL_REDUCE, RunExpectation
from commbench.measure.bandwidth import busbw_gbps
from commbench.names import BUSBW_FACTORS
from commbench.schema import common
from commbench.schema.column import is_empty
from commbench.schema.hunt import HUNT_FILE, KEY_COLUMNS, RESULT_COLUMNS
from commbench.store import SCHEMA_VERSION

if TYPE_CHECKING:
    from commbench.cluster.exchange import Timed

MATRIX_FILES = {common.BUSBW_GBPS: "node_matrix_busbw_gbps.csv", "latency_us": "node_matrix_latency_us.csv"}
FIRST_PASS: HuntPhase = "pairs"
SECOND_PASS: HuntPhase = "second_pass"
RowPhase = Literal[HuntPhase, "note", "finding"]
"""A row's phase: the point that measured it, or a note or a finding (the diagnosis)."""
TimesKey = tuple[str, str, str, str]
"""(phase, test, node_a, node_b) of a pair measurement (times_key)."""
Times = dict[TimesKey, list[list[float]]]
"""A pass's pair measurements: their samples in seconds, one list per repeat."""
Verdict = Literal["suspect", "cleared", "healthy", "control"]
"""A row's verdict: a finding's word, or a second pass's control pair (other rows leave it empty)."""
SUSPECT: Verdict = "suspect"
CLEARED: Verdict = "cleared"
HEALTHY: Verdict = "healthy"
CONTROL: Verdict = "control"


def _row(spec: HuntSettings, layout: Layout, phase: RowPhase, test: str, **values: object) -> dict:
    row: dict[str, object] = dict.fromkeys(RESULT_COLUMNS, None)
    row.update(schema_version=SCHEMA_VERSION, run_id="", bench="hunt", phase=phase, test=test, node_a="", node_b="",
               ranks_a="", ranks_b="", backend=spec.backend, device=spec.device,
               world_size=sum(len(members) for members in layout.ranks.values()), size_bytes=0, verdict="", note="")
    row.update(values)
    return row


def intra_row(spec: HuntSettings, phase: HuntPhase, node: str, layout: Layout, size: int, timed: Timed) -> dict:
    ranks = len(layout.ranks[node])
    row = _row(spec, layout, phase, "all_reduce", node_a=node, ranks_a=layout.ranks_text(node), lanes=ranks,
               size_bytes=size)
    seconds = timed_columns(row, timed, spec.statistic, KEY_COLUMNS)
    row[common.BUSBW_GBPS] = busbw_gbps(size, seconds, BUSBW_FACTORS["all_reduce"](ranks))
    row.update(RunExpectation(spec.expectation).columns(INTRA_ALL_REDUCE))
    return row


def pair_row(spec: HuntSettings, phase: HuntPhase, test: str, pair: tuple[str, str], layout: Layout, lanes: int,
             size: int, timed: Timed, *, control: bool = False) -> dict:
    """busbw as nccl-tests' sendrecv defines it: bytes each rank sends (and receives) per exchange / time. A second
    pass's control pair (two known-good nodes) says so in `verdict`."""
    a, b = sorted(pair)  # one order for a pair in every run (rank numbers may land on other nodes next time)
    row = _row(spec, layout, phase, test, node_a=a, node_b=b, ranks_a=layout.ranks_text(a),
               ranks_b=layout.ranks_text(b), lanes=lanes, size_bytes=size, verdict=CONTROL if control else "")
    seconds = timed_columns(row, timed, spec.statistic, KEY_COLUMNS)
    if test == "bandwidth":
        row[common.BUSBW_GBPS] = busbw_gbps(size, seconds, BUSBW_FACTORS["sendrecv"](2))
        row.update(RunExpectation(spec.expectation).columns(ACROSS_NODES))
    else:
        row["latency_us"] = seconds * 1e6
    return row


def note_row(spec: HuntSettings, layout: Layout, text: str) -> dict:
    return _row(spec, layout, "note", "note", note=text)


def single_rank_note(nodes: list[str]) -> str:
    return f"intra-node all_reduce skipped on {compress(nodes)}: one rank each"


def _figures(rows: list[dict], phase: HuntPhase, *, controls: bool = False) -> tuple[dict, dict]:
    """(pair → {busbw_gbps, latency_us}, node → intra-node busbw at its largest size) of one pass; controls: the
    second pass's control pairs instead of its re-pairs."""
    pairs: dict[tuple[str, str], dict] = {}
    intra: dict[str, tuple[int, float]] = {}
    for row in rows:
        if row["phase"] != phase and not (phase == FIRST_PASS and row["phase"] == "intra"):
            continue
        if row["test"] in ("bandwidth", "latency") and (row["verdict"] == CONTROL) != controls:
            continue
        if row["test"] == "bandwidth":
            pairs.setdefault((row["node_a"], row["node_b"]), {})[common.BUSBW_GBPS] = row[common.BUSBW_GBPS]
        elif row["test"] == "latency":
            pairs.setdefault((row["node_a"], row["node_b"]), {})["latency_us"] = row["latency_us"]
        elif row["test"] == "all_reduce" and row[common.SIZE_BYTES] >= intra.get(row["node_a"], (0, 0.0))[0]:
            intra[row["node_a"]] = (row[common.SIZE_BYTES], row[common.BUSBW_GBPS])
    return pairs, {node: value for node, (_, value) in intra.items() if not is_empty(value)}


def _settings(spec: HuntSettings) -> judge.Settings:
    return judge.Settings(threshold_pct=spec.threshold_pct, min_z=spec.min_z, alpha=spec.alpha,
                          stall_factor=spec.stall_factor, statistic=spec.statistic)


def times_key(row: dict) -> TimesKey:
    """How a measurement's samples are kept for the diagnosis: (phase, test, node_a, node_b)."""
    return row["phase"], row["test"], row["node_a"], row["node_b"] or ""


def _samples(times: Times, phase: HuntPhase, repeat: int | None = None) -> Samples:
    """Per pair test, each pair's exchange times (seconds) of one pass: every repeat's, or one repeat's."""
    found: Samples = {}
    for (row_phase, test, a, b), repeats in times.items():
        if row_phase == phase and test in ("bandwidth", "latency"):
            chosen = repeats if repeat is None else repeats[repeat:repeat + 1]
            found.setdefault(test, {})[(a, b)] = [value for values in chosen for value in values]
    return found


def _repeats(times: Times, phase: HuntPhase) -> list[Samples]:
    """One Samples per repeat of a pass (as many as its pairs were measured)."""
    count = min((len(repeats) for (row_phase, *_), repeats in times.items() if row_phase == phase), default=0)
    return [_samples(times, phase, repeat) for repeat in range(count)]


def diagnose_rows(rows: list[dict], times: Times, spec: HuntSettings, layout: Layout) -> judge.Diagnosis:
    pairs, intra = _figures(rows, FIRST_PASS)
    return judge.diagnose(list(layout.nodes), pairs, intra, _settings(spec), baseline=spec.baseline,
                          samples=_samples(times, FIRST_PASS), repeats=_repeats(times, FIRST_PASS))


def confirm_rows(rows: list[dict], times: Times, spec: HuntSettings, layout: Layout,
                 gpu_facts: FactsByNode) -> judge.Diagnosis:
    first = diagnose_rows(rows, times, spec, layout)
    second_pairs, second_intra = _figures(rows, SECOND_PASS)
    controls, _ = _figures(rows, SECOND_PASS, controls=True)
    final = confirm(first, second_pairs, second_intra, _settings(spec), controls=controls,
                          samples=_samples(times, SECOND_PASS), first_samples=_samples(times, FIRST_PASS),
                          repeats=_repeats(times, SECOND_PASS))
    for node, found in findings(gpu_facts).items():
        final.suspect_nodes.setdefault(node, []).extend(found)
    return final


def describe(evidence: dict) -> str:
    """One line of evidence, for the table and the finding rows."""
    if evidence["test"] == "nvml":
        return f"GPU {evidence['gpu']} {evidence['fact']} = {evidence['value']} (peers: {evidence['peers']})"
    if evidence["test"] == judge.STALLS:
        text = (f"stalls in {evidence['stall_pct']:.1f} % of exchanges, {evidence['lost_ms']:.0f} ms lost "
                f"({evidence['slower_pct']:+.0f} % time)")
    else:
        text = (f"{evidence['test']} {evidence['value']:.4g} {evidence['unit']}, {evidence['slower_pct']:+.0f} % "
                f"against {evidence['reference']:.4g} (z {evidence['z']:.1f})")
    if evidence.get("p") is not None:
        text += f", p {evidence['p']:.2g}"
    if evidence.get("slow_with") is not None:
        text += f", slow with {','.join(evidence['slow_with']) or 'none'}"
        if evidence.get("fine_with"):
            text += f", fine with {','.join(evidence['fine_with'])}"
    second = evidence.get("second_pass")
    if second is not None:
        text += f"; second pass: {json.dumps(second, separators=(',', ':'))}"
    if evidence.get("note"):
        text += f"; {evidence['note']}"
    return text


def finding_rows(spec: HuntSettings, layout: Layout, final: judge.Diagnosis) -> list[dict]:
    rows = [_row(spec, layout, "finding", "node", node_a=node, ranks_a=layout.ranks_text(node), verdict=SUSPECT,
                 note=" | ".join(describe(entry) for entry in evidence))
            for node, evidence in final.suspect_nodes.items()]
    rows += [_row(spec, layout, "finding", "link", node_a=a, node_b=b, verdict=SUSPECT,
                  note=" | ".join(describe(entry) for entry in evidence))
             for (a, b), evidence in final.suspect_links.items()]
    rows += [_row(spec, layout, "finding", "node" if "node" in entry else "link",
                  node_a=entry.get("node") or entry["link"][0], node_b=entry["link"][1] if "link" in entry else "",
                  verdict=CLEARED, note=describe(entry)) for entry in final.cleared]
    rows += [note_row(spec, layout, note) for note in final.notes]
    if not final.suspect_nodes and not final.suspect_links:
        rows.append(_row(spec, layout, "finding", "all", verdict=HEALTHY, note=healthy_note(len(layout.nodes), final)))
    return rows


def healthy_note(nodes: int, final: judge.Diagnosis) -> str:
    """A clean verdict, with what it could have seen: "no suspect; a node ≥ 18 % slower would have been named"."""
    if not final.detectable:
        return f"no suspect among {nodes} node(s)"
    seen = ", ".join(f"{test} ≥ {value:.0f} %" for test, value in final.detectable.items())
    return (f"no suspect among {nodes} node(s); a node this much slower would have been named ({seen}; stalls: "
            "time lost to them)")


def matrices(rows: list[dict], nodes: list[str]) -> dict[str, list[list[float | None]]]:
    """The first pass's node × node figures (symmetric; None where a pair was not measured or on the diagonal)."""
    pairs, _ = _figures(rows, FIRST_PASS)
    index = {node: position for position, node in enumerate(nodes)}
    result = {}
    for column in MATRIX_FILES:
        grid: list[list[float | None]] = [[None] * len(nodes) for _ in nodes]
        for (a, b), figures in pairs.items():
            if not is_empty(figures.get(column)):
                grid[index[a]][index[b]] = grid[index[b]][index[a]] = figures[column]
        result[column] = grid
    return result


def document(spec: HuntSettings, layout: Layout, rows: list[dict], final: judge.Diagnosis,
             gpu_facts: FactsByNode) -> dict:
    nodes = list(layout.nodes)
    return {
        "schema_version": SCHEMA_VERSION,
        "nodes": nodes,
        "ranks": {node: list(layout.ranks[node]) for node in nodes},
        "pairs": f"random:{spec.random_rounds}" if spec.random_rounds else "all",
        "thresholds": {"slower_pct": spec.threshold_pct, "min_z": spec.min_z, "alpha": spec.alpha,
                       "stall_factor": spec.stall_factor},
        "detectable_slowdown_pct": {test: round(value, 2) for test, value in final.detectable.items()},
        "reference": {**final.references, "source": final.reference_source, "sources": final.reference_sources},
        "second_pass_reference": final.second_references,
        "healthy": not final.suspect_nodes and not final.suspect_links,
        "suspect_nodes": [{"node": node, "evidence": evidence} for node, evidence in final.suspect_nodes.items()],
        "suspect_links": [{"nodes": list(link), "evidence": evidence}
                          for link, evidence in final.suspect_links.items()],
        "exclude": compress(sorted(final.suspect_nodes, key=nodes.index)) if final.suspect_nodes else "",
        "cleared": final.cleared,
        "notes": final.notes + [row["note"] for row in rows if row["phase"] == "note"],
        "gpu_facts": gpu_facts,
        "matrix": {"nodes": nodes, **matrices(rows, nodes)},
    }


def write_outputs(run_dir: Path, spec: HuntSettings, layout: Layout, rows: list[dict], final: judge.Diagnosis,
                  gpu_facts: FactsByNode) -> None:
    doc = document(spec, layout, rows, final, gpu_facts)
    write_file(Path(run_dir) / HUNT_FILE, json.dumps(doc, indent=2, default=str) + "\n")
    for column, name in MATRIX_FILES.items():
        write_file(Path(run_dir) / name,
                   matrix_csv(doc["matrix"]["nodes"], doc["matrix"][column], f"node ({column})"))
