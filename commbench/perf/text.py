"""nccl-tests' text output (src/util.cu and src/common.cu of nccl-tests 2.19: header, rank lines, the two column
header lines, a row per size with out-of-place and in-place bodies, the closing lines), printed from a perf run.

The first line says commbench wrote it; everything after it has nccl-tests' layout, so tools that read nccl-tests
logs (`commbench import nccl-tests` among them) read it."""

import math
from collections.abc import Sequence

import commbench
from commbench.cluster.hostlist import number_ranges
from commbench.perf.results import Body, Line, PerfRun

NCCL_TESTS_VERSION = "2.19.6"
"""The nccl-tests release whose output layout this reproduces."""
_NOT_MEASURED = ("N/A", "N/A", "N/A", "N/A")
_LISTED = 3
"""How many stood-in times a `# commbench:` line names before it counts the rest."""


def float_text(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: two decimals if they fit the width, else one, else none, else an exponent."""
    if isinstance(value, float) and math.isnan(value):
        return f"{'N/A':>{width}}"
    for pattern in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        text = pattern % value
        if len(text) <= width:
            return text
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def nccl_tests_text(run: PerfRun, *, notes: Sequence[str] = ()) -> str:
    settings, meta = run.settings, run.meta
    per_iteration = bool(settings.get("per_iter_timing"))
    program = settings.get("program", "")
    lines = [f"# commbench {commbench.__version__} perf, nccl-tests {NCCL_TESTS_VERSION} output: torch "
             f"{meta.get('torch_version')}, {meta.get('backend')} {meta.get('backend_version')}",
             f"# Collective test starting: {program}",
             _settings_line(settings)]
    blocking = settings.get("blocking", 0)
    if blocking:
        lines.append({1: "# Blocking Enabled: wait and barrier after each inner iteration (-m) ",
                      2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier ",
                      3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes "
                         "barrier "}[blocking])
    if per_iteration:
        lines.append("# Per-Iteration Report: host clock (CPU) or CUDA event timing; i_* uses max over process rows ")
    lines += [f"# commbench: {note}" for note in notes]
    lines += ["#", "# Using devices"]
    lines += [_rank_line(rank) for rank in meta.get("ranks") or []]
    lines += ["#", *_column_headers(per_iteration)]
    lines += [_result_line(line, per_iteration) for line in run.lines]
    errors = run.out_of_bounds
    lines += [f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}",
              f"# {'Avg bus bandwidth':<20} : {_g(run.average_busbw_gbps)} ",
              *_expected_lines(run),
              *([f"# commbench: {run.host_issue}"] if run.host_issue else []),
              *_stand_in_lines(run), *_unchecked_lines(run),
              "#", f"# Collective test concluded: {program}", "#", ""]
    return "\n".join(lines)


def _expected_lines(run: PerfRun) -> list[str]:
    """commbench's addition under nccl-tests' closing lines: the busbw this machine's topology allows (commbench
    expect), and the largest size's share of it."""
    if run.expected is None:
        return []
    expected, basis = run.expected
    largest = max(run.lines, key=lambda line: line.size_bytes, default=None)
    bodies = [body.busbw_gbps for body in largest.bodies] if largest else []
    share = f"; the largest size reaches {100 * max(bodies) / expected:.0f} %" if bodies and expected > 0 else ""
    return [f"# commbench: expected busbw {_g(expected)} GB/s ({basis}){share}"]


def _stand_in_lines(run: PerfRun) -> list[str]:
    """commbench's line under the closing lines where a printed time is not its cycle's own sample: which ones, and
    what was printed instead (nccl-tests' columns hold numbers only, so the mark is this line, not the cell)."""
    stood_in = run.stood_in()
    if not stood_in:
        return []
    shown = ", ".join(stood_in[:_LISTED]) + (f" and {len(stood_in) - _LISTED} more" if len(stood_in) > _LISTED else "")
    return [f"# commbench: samples.csv has no sample for {len(stood_in)} of the {run.bodies_printed} times printed "
            f"({shown}): each is its row's median time (time_us_p50) instead, and its algbw and busbw and the Avg bus "
            "bandwidth follow from it"]


def _unchecked_lines(run: PerfRun) -> list[str]:
    """Under `Out of bounds values : 0 OK`, which counts checked results only: how many were not checked (-c 0)."""
    if not run.unchecked:
        return []
    return [f"# commbench: {run.unchecked} of {run.bodies_printed} result(s) unchecked (#wrong N/A, -c 0): Out of "
            "bounds values counts the checked ones only, so its OK says nothing of these"]


def _settings_line(settings: dict) -> str:
    step_kind = settings.get("step_kind", "factor")
    return (f"# nThread 1 nGpus 1 minBytes {settings.get('min_bytes')} maxBytes {settings.get('max_bytes')} "
            f"step: {settings.get('step')}({step_kind}) warmup iters: {settings.get('warmup_iters')} "
            f"iters: {settings.get('iters')} agg iters: {settings.get('agg_iters')} "
            f"validation: {settings.get('validation')} graph: {settings.get('graph')} unalign: 0")


def _rank_line(rank: dict) -> str:
    name = rank.get("device")
    if rank.get("bus") == "cpu" and rank.get("cores"):  # a CPU rank's "device" is the cores it may run on
        name = f"{name}, cores {','.join(number_ranges(rank['cores']))}"
    return (f"#  Rank {rank['rank']:2d} Group  0 Pid {rank.get('pid') or 0:6d} on {rank.get('host'):>10} device "
            f"{rank.get('device_index') or 0:2d} [{rank.get('bus')}] {name}")


def _column_headers(per_iteration: bool) -> list[str]:
    """nccl-tests' writeResultHeader, character for character (a trailing space included)."""
    key = "# %10s  %12s  %8s  %6s  %6s"
    names: tuple[str, ...]
    units: tuple[str, ...]
    if per_iteration:
        title = key % ("", "", "", "", "") + "              out-of-place (+ per-iteration)                         " \
                                             "       in-place (+ per-iteration)"
        body = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s"
        names = ("time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%")
        units = ("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)")
    else:
        title = key % ("", "", "", "", "") + "           out-of-place                       in-place          "
        body = "  %7s  %6s  %6s  %6s"
        names, units = ("time", "algbw", "busbw", "#wrong"), ("(us)", "(GB/s)", "(GB/s)", "")
    return [title,
            key % ("size", "count", "type", "redop", "root") + (body % names) * 2 + " ",
            key % ("(B)", "(elements)", "", "", "") + (body % units) * 2 + " "]


def _result_line(line: Line, per_iteration: bool) -> str:
    text = "%12i  %12i  %8s  %6s  %6i" % (line.size_bytes, line.count, line.type_name, line.redop, line.root)
    for body in (line.out_of_place, line.in_place):
        text += _body_text(body, per_iteration)
    return text


def _body_text(body: Body | None, per_iteration: bool) -> str:
    if body is None:  # torch has no such placement of this collective
        return "  %7s  %6s  %6s  %6s" % _NOT_MEASURED + ("  %7s  %7s  %7s  %7s" % _NOT_MEASURED
                                                           if per_iteration else "")
    wrong = "    N/A" if body.n_wrong is None else "  %6g" % body.n_wrong  # nccl-tests' N/A is one space short
    text = f"  {float_text(body.time_us, 7)}  {float_text(body.algbw_gbps, 6)}  {float_text(body.busbw_gbps, 6)}" \
           + wrong
    if per_iteration:
        stats = body.iterations
        if stats is None:
            text += "  %7s  %7s  %7s  %7s" % _NOT_MEASURED
        else:
            text += "".join(f"  {float_text(value, 7)}" for value in (stats.min, stats.max, stats.p99, stats.cv_pct))
    return text


def _g(value: float) -> str:
    """printf's %g (what nccl-tests prints the average with): six significant digits, no trailing zeros."""
    return "nan" if math.isnan(value) else "%g" % value
