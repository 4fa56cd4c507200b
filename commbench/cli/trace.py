"""`commbench trace analyze`: overlap and exposed communication of torch.profiler traces, GPU or CPU."""

from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.cli.shared import machine_options
from commbench.cli.trace_calls import call_document, describe_calls, describe_histogram, describe_stragglers
from commbench.units import format_bytes


@click.group()
def trace() -> None:
    """Analyse profiler traces (Kineto JSON, plain or gzipped)."""


@trace.command(name="analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--calls", "show_calls", is_flag=True,
              help="Also print every collective call: rank, step, kind, size, group, duration, algbw, busbw.")
@machine_options("The machine the traces were recorded on", "the expected busbw of each collective and group size")
@json_option
def analyze_command(paths: tuple[Path, ...], show_calls: bool, machine: str | None, facts_file: str | None,
                    as_json: bool) -> None:
    """Communication, computation, overlap %, exposed communication and idle time per rank and ProfilerStep,
    per collective kind, every collective call with its size, group and bandwidth (a size histogram per kind with
    p50/p90/p99 busbw), and (several ranks) the skew of the same call across ranks, per point, and which rank
    arrives last at each matched call. GPU traces are classified as Holistic Trace Analysis does (NCCL kernels old
    and new: ncclKernel_*, ncclDevKernel_*); CPU (gloo) traces by gloo:* spans against the main thread's aten::
    ops."""
    from commbench import profiling
    from commbench.expect import chosen_facts
    from commbench.expect.rows import for_trace_calls

    named = chosen_facts(machine, facts_file) if machine or facts_file else None
    analysis = profiling.analyze(paths)
    expected = for_trace_calls(named, [(call.kind, call.group_size) for call in analysis.every_call
                                       if call.group_size and call.busbw_gbps == call.busbw_gbps])
    if as_json:
        emit_json({"traces": analysis.overlap, **analysis.skew,
                   "calls": [{"trace": path, **call_document(call)} for path, found in analysis.calls.items()
                             for call in found],
                   "size_histogram": analysis.size_histogram, "stragglers": analysis.stragglers,
                   "expected": expected})
        return
    for result in analysis.overlap:
        click.echo(_describe(result))
    if show_calls:
        click.echo("\n".join(describe_calls(analysis.every_call)))
    click.echo("\n".join(describe_histogram(analysis.size_histogram)))
    click.echo("\n".join(_describe_expected(expected)))
    if analysis.stragglers is not None:  # more than one trace
        click.echo("\n".join(_describe_skew(analysis.skew)))
        click.echo("\n".join(describe_stragglers(analysis.stragglers)))


def _describe_expected(expected: list[dict]) -> list[str]:
    """The busbw the trace's machine allows per collective and group size (commbench expect), or why there is none
    (once, where no machine was named)."""
    lines = []
    for item in expected:
        figure, basis = item["expected_busbw_gbps"], item["expected_basis"]
        if figure is None and basis.startswith("none: a trace"):
            return [f"expected busbw: none ({basis.removeprefix('none: ')})"]
        lines.append(f"expected busbw of {item['collective']} over {item['group_size']} ranks: "
                     + (f"{figure:.4g} GB/s ({basis})" if figure is not None else basis))
    return lines


def _pct(value: float | None) -> str:
    return "n/a (no communication)" if value is None else f"{value:.2f} %"


def _describe(result: dict) -> str:
    lines = [f"{result['path']}: rank {result['rank']} of {result['world_size']}, {result['backend'] or '?'} "
             f"({result['device']} trace)",
             f"  whole trace: comm {result['comm_us']:.0f} us, compute {result['compute_us']:.0f} us, "
             f"overlap {_pct(result['overlap_pct'])}, exposed comm {result['exposed_comm_us']:.0f} us, "
             f"idle {result['idle_us']:.0f} us"]
    if result["complete_steps"]:
        complete = result["complete_steps"]
        lines.append(f"  complete steps (all but the last): overlap {_pct(complete['overlap_pct'])}, "
                     f"exposed comm {complete['exposed_comm_us']:.0f} us")
    for step in result["steps"]:
        lines.append(f"  step {step['step']}: comm {step['comm_us']:.0f} us, compute {step['compute_us']:.0f} us, "
                     f"overlap {_pct(step['overlap_pct'])}, exposed {step['exposed_comm_us']:.0f} us, "
                     f"idle {step['idle_us']:.0f} us")
    for kind in result["collectives"]:
        size = _bytes_text(kind)
        if kind.get("unattributed"):
            size += " (ncclDevKernel_Generic, unattributed: no launching collective call found in the trace)"
        elif kind.get("generic_kernels"):
            size += (f" ({kind['generic_kernels']} of them ncclDevKernel_Generic, attributed to the collective that "
                     "launched them)")
        lines.append(f"  {kind['kind']}: {kind['count']} x, {kind['total_us']:.0f} us{size}")
    return "\n".join(lines)


def _bytes_text(kind: dict) -> str:
    """A kind's bytes, saying over how many of its calls where not all record a size (a partial sum, not a total)."""
    if kind["bytes"] is None:
        return ""
    if kind["sized"] == kind["count"]:
        return f", {kind['bytes']} B"
    return f", {kind['bytes']} B over the {kind['sized']} of {kind['count']} that record a size"


def _call(entry: dict) -> str:
    if entry["bytes"] is None:
        return f"{entry['kind']} (size and dtype not recorded in the trace)"
    return f"{entry['kind']} {format_bytes(entry['bytes'])} {entry['dtype']}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} us"


def _describe_skew(report: dict) -> list[str]:
    """What was matched against what, per point a line per kind × size × dtype, then the summary."""
    lines = ["skew: start-time spread of the same call across ranks, the same call being the k-th call of one kind, "
             "size and dtype on each rank of one point (ranks' clocks must agree: one host, or synchronised hosts)"]
    alone = [point for point in report["skew_points"] if len(point["traces"]) == 1]
    for point in report["skew_points"]:
        if len(point["traces"]) > 1:  # points of one trace get one line together: a 1-rank sweep has one per point
            entries = [entry for entry in report["skew"] if entry["point"] == point["point"]]
            lines.extend(_describe_point(point, entries))
    if alone:
        lines.append(f"{len(alone)} point(s) with one trace only, nothing to match it against: "
                     f"{', '.join(point['label'] for point in alone)}")
    lines.append(_describe_summary(report))
    return lines


def _describe_point(point: dict, entries: list[dict]) -> list[str]:
    ranks = ", ".join("?" if rank is None else str(rank) for rank in point["ranks"])
    if point["name"] is None:
        label = "given traces"
        header = f"given traces {', '.join(point['traces'])} (ranks {ranks}): {point['matched_by']}"
    else:
        label = f"point {point['point']}"
        header = f"{label}: {point['label']}, ranks {ranks} ({point['folder']})"
        if any(entry["size_from"] == "point" for entry in entries):
            header += "; sizes of the point's own calls from the file name (the trace records none)"
    if point["note"]:
        header += f": skew not computed: {point['note']}"
    lines = [header]
    for entry in entries:
        unmatched = f", {entry['unmatched']} unmatched (no counterpart on every rank)" if entry["unmatched"] else ""
        lines.append(f"  skew {_call(entry)} ({label}, {len(entry['ranks'])} ranks): {entry['matched']} matched"
                     f"{unmatched}, mean {_us(entry['skew_us_mean'])}, max {_us(entry['skew_us_max'])}; "
                     "start-time spread of the same call across ranks")
    return lines


def _describe_summary(report: dict) -> str:
    summary = report["skew_summary"]
    largest = summary["largest_at"]
    where = ""
    if largest:
        point = "given traces" if largest["point_name"] is None else f"point {largest['point']}"
        where = f" ({_call(largest)}, {point})"
    groups = "point(s)" if all(point["name"] for point in report["skew_points"]) else "group(s) of traces"
    skipped = f" ({summary['points_not_matched']} more not matched)" if summary["points_not_matched"] else ""
    return (f"skew summary: {summary['matched']} call(s) matched in {summary['points']} {groups}{skipped}, "
            f"{summary['unmatched']} unmatched; mean {_us(summary['skew_us_mean'])}, largest "
            f"{_us(summary['skew_us_max'])}{where}")
