"""`commbench trace analyze`: overlap and exposed communication of torch.profiler traces, GPU or CPU."""

import json
from pathlib import Path

import click

from commbench.errors import CommbenchError

# in folders: gzipped JSON and torch's *.pt.trace.json; plain *.json there are often not traces (meta.json)
_FOLDER_SUFFIXES = (".json.gz", ".pt.trace.json")


@click.group()
def trace() -> None:
    """Analyse profiler traces (Kineto JSON, plain or gzipped)."""


def _trace_paths(paths: tuple[Path, ...]) -> list[Path]:
    """Files as given; folders (e.g. results/<run>/traces) expand to the traces inside them."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(_FOLDER_SUFFIXES)))
        else:
            found.append(path)
    if not found:
        raise CommbenchError(f"no trace files in {', '.join(map(str, paths))}; pass .json or .json.gz traces")
    return found


@trace.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable results.")
def analyze_command(paths: tuple[Path, ...], as_json: bool) -> None:
    """Communication, computation, overlap %, exposed communication and idle time per rank and ProfilerStep,
    per collective kind, and (several ranks) the skew of matched collectives. GPU traces are classified as
    Holistic Trace Analysis does; CPU (gloo) traces by gloo:* spans against the main thread's aten:: ops."""
    from commbench.profiling.overlap import analyze, skew
    from commbench.profiling.trace_file import load_trace

    traces = [load_trace(path) for path in _trace_paths(paths)]
    results = [analyze(trace) for trace in traces]
    skews = skew(traces) if len(traces) > 1 else []
    if as_json:
        click.echo(json.dumps({"traces": results, "skew": skews}, indent=2))
        return
    for result in results:
        click.echo(_describe(result))
    for entry in skews:
        click.echo(f"skew {entry['kind']}: {entry['matched']} matched, mean {entry['skew_us_mean']:.1f} us, "
                   f"max {entry['skew_us_max']:.1f} us (start-time spread across the given ranks)")


analyze_command.name = "analyze"


def _pct(value) -> str:
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
        size = f", {kind['bytes']} B" if kind["bytes"] is not None else ""
        if kind.get("unattributed"):
            size += " (ncclDevKernel_Generic, unattributed: no launching collective call found in the trace)"
        elif kind.get("generic_kernels"):
            size += (f" ({kind['generic_kernels']} of them ncclDevKernel_Generic, attributed to the collective that "
                     "launched them)")
        lines.append(f"  {kind['kind']}: {kind['count']} x, {kind['total_us']:.0f} us{size}")
    return "\n".join(lines)
