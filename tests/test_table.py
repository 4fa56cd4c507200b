"""The collective tables on hand-made rows (no processes): nccl-tests' Avg bus bandwidth is the mean busbw of every
row and placement the table prints, the mean over sizes ≥ 1 MiB is named apart; a short table has the columns of the
placements it measured only; the ring/builtin ratio table only where both implementations ran."""

import re

import pandas as pd
import pytest

from commbench.benches.collective import RESULT_COLUMNS
from commbench.sweep.table import format_tables

pytestmark = pytest.mark.no_process

MIB = 1024**2
AVG = re.compile(r"^# Avg bus bandwidth: (\S+) GB/s \((\d+) results?\); mean busbw ≥ 1 MiB: (.*?)"
                 r"(?:; expected: none|; expected \S+ GB/s)?$")


def _row(collective="all_gather", size=4096, inplace=False, busbw=1.0, impl="builtin", **extra) -> dict:
    """A stored row whose busbw is `busbw` (time from it, a tight CI)."""
    row = dict.fromkeys(RESULT_COLUMNS)
    p50 = size / (busbw * 2 * 1e9) * 1e6
    row.update(schema_version=1, run_id="hand", bench="collective", collective=collective, impl=impl,
               backend="gloo", device="cpu", world_size=2, dtype="float32", op="none", inplace=inplace,
               size_bytes=size, count=size // 8, iters=20, warmup=5, stop_reason="iters", timing="batch",
               calls_per_sample=10,
               timing_method="batch: 10 back-to-back calls per sample, host clock, mean over ranks",
               time_us_p50=p50, time_us_ci_lo=p50 * 0.98, time_us_ci_hi=p50 * 1.02, algbw_gbps=busbw * 2,
               busbw_gbps=busbw, n_wrong=0, source="commbench")
    row.update(extra)
    return row


def _blocks(table: str) -> dict[str, list[str]]:
    """Each table's lines by its title's first words (`# all_gather (builtin, ...)` → `all_gather builtin`), without
    the short form's noise summary under the last one."""
    blocks = {}
    for block in table.split("\n\n"):
        lines = [line for line in block.splitlines()
                 if "±CI (%) = half-width" not in line and not line.startswith(("# expected busbw", "# % of expected"))]
        match = re.match(r"# (\w+) \((\w+),", lines[0]) or re.match(r"# (ring vs builtin): (\w+)", lines[0])
        blocks[" ".join(match.groups())] = lines
    return blocks


def _avg(lines: list[str]) -> tuple[float, int, str]:
    [match] = [AVG.match(line) for line in lines if AVG.match(line)]
    return float(match.group(1)), int(match.group(2)), match.group(3)


# both placements at two small sizes and one large, and a size measured out of place only
BOTH = [(1024, False, 0.5), (1024, True, 0.25), (64 * 1024, False, 2.0), (64 * 1024, True, 3.0),
        (4 * MIB, False, 10.0), (4 * MIB, True, 12.0), (8 * MIB, False, 14.0)]


@pytest.mark.parametrize("verbose", [False, True])
def test_avg_bus_bandwidth_is_the_mean_of_every_printed_row_and_placement(verbose):
    rows = pd.DataFrame([_row(size=size, inplace=inplace, busbw=busbw) for size, inplace, busbw in BOTH])
    lines = _blocks(format_tables(rows, verbose=verbose))["all_gather builtin"]
    avg, count, large = _avg(lines)
    busbws = [busbw for _, _, busbw in BOTH]
    assert count == len(busbws) == 7 and avg == pytest.approx(sum(busbws) / len(busbws), abs=5e-4)  # 6.107
    # what was the "Avg" before: the mean over sizes ≥ 1 MiB, now under its own name
    assert large == f"{(10.0 + 12.0 + 14.0) / 3:.3f} GB/s (3 results, 4 MiB to 8 MiB)"
    assert sum("Avg bus bandwidth" in line for line in lines) == 1
    # every printed busbw figure is one the average took
    printed = [float(value) for line in lines if not line.startswith("#") for value in line.split()
               if re.fullmatch(r"\d+\.\d{3}", value)]
    assert sorted(set(printed) & set(busbws)) == sorted(set(busbws))


def test_a_table_without_large_sizes_says_so_and_an_imported_one_keeps_nccl_tests_avg():
    small = pd.DataFrame([_row(size=1024, busbw=1.0), _row(size=2048, busbw=2.0)])
    avg, count, large = _avg(format_tables(small).splitlines())
    assert (avg, count) == (1.5, 2) and large.startswith("no size ≥ 1 MiB measured")
    # imported nccl-tests rows: the Avg is the rows' mean, which is nccl-tests' own Avg line (the import checks it)
    imported = pd.DataFrame([_row(size=size, inplace=inplace, busbw=busbw, source="nccl-tests", iters=None,
                                  time_us_ci_lo=None, time_us_ci_hi=None) for size, inplace, busbw in BOTH])
    table = format_tables(imported)
    avg, count, _ = _avg(table.splitlines())
    assert count == 7 and avg == pytest.approx(sum(busbw for _, _, busbw in BOTH) / 7, abs=5e-4)
    assert "nccl-tests printed (imported: no samples, so no CI)" in table.splitlines()[0]
    assert "noisy" not in table.split("\n# ±CI")[0]  # no CI to judge: not flagged noisy
    assert table.splitlines()[-1].endswith("7 imported point(s): no samples, so no CI")


def test_a_short_table_has_the_columns_of_the_placements_it_measured():
    rows = pd.DataFrame([_row("all_reduce", size=size, inplace=True) for size in (1024, 4096)]
                        + [_row("all_gather", size=size) for size in (1024, 4096)]
                        + [_row("reduce_scatter", size=size, inplace=inplace, busbw=busbw)
                           for size, inplace, busbw in BOTH])
    short = _blocks(format_tables(rows))
    assert list(short) == ["all_reduce builtin", "all_gather builtin", "reduce_scatter builtin"]
    for name, placement in (("all_reduce builtin", "in-place"), ("all_gather builtin", "out-of-place")):
        title, head, *data, avg = short[name]
        assert f"(builtin, {placement})" in title and "batch timing: median of 20 samples of 10 back-to-back " \
            "calls, mean over ranks" in title
        assert head.count("time (us)") == head.count("±CI (%)") == head.count("busbw (GB/s)") == 1
        assert "size (B)" in head and "algbw (GB/s)" in head
        assert len(data) == 2 and all(line.split().count("-") == 1 for line in data)  # % of expected: no figure
        assert avg.startswith("# Avg bus bandwidth")
    # both placements measured: two column groups under their names, "-" only where a size lacks one
    title, groups, head, *data, avg = short["reduce_scatter builtin"]
    assert "(builtin, out-of-place and in-place)" in title
    assert groups.split() == ["#", "out-of-place", "in-place"]
    assert head.count("time (us)") == head.count("±CI (%)") == 2
    # a placement's % of expected is "-" (these rows carry no expected busbw); 8 MiB: out of place only
    assert [line.split().count("-") for line in data] == [2, 2, 2, 7]
    # verbose: nccl-tests' layout, both groups on every table, "-" for the placement not measured
    verbose = _blocks(format_tables(rows, verbose=True))
    for name in short:
        assert verbose[name][1].split() == ["#", "out-of-place", "in-place"]
        assert verbose[name][2].count("time p50") == 2
    assert all(line.split().count("-") == 5 for line in verbose["all_reduce builtin"][4:6])


def test_the_noise_is_said_once_under_all_short_tables():
    rows = pd.DataFrame([_row("all_reduce", size=1024, inplace=True, time_us_ci_hi=1.0),
                         _row("all_gather", size=1024, time_us_ci_lo=None, time_us_ci_hi=None),
                         _row("all_gather", size=2048)])
    table = format_tables(rows)
    summary = [line for line in table.splitlines() if "±CI (%) = half-width" in line]
    assert summary == [table.splitlines()[-1]]
    assert "2 of 3 points (1 without a CI)" in summary[0]
    flags = [" ".join(line.split()[11:]) for line in table.splitlines() if not line.startswith("#") and line]
    assert flags == ["noisy", "no CI", ""]
    tight = format_tables(pd.DataFrame([_row(size=1024)]))
    assert tight.splitlines()[-1].endswith("all 1 points within ±10 %")


def test_the_ratio_table_appears_only_when_both_implementations_ran():
    builtin = [_row(size=size, busbw=1.0) for size in (1024, 4096)]
    ring = [_row(size=size, busbw=2.0, impl="ring") for size in (1024, 4096)]
    for verbose in (False, True):
        assert "ring vs builtin" not in format_tables(pd.DataFrame(builtin), verbose=verbose)
        assert "ring vs builtin" not in format_tables(pd.DataFrame(ring), verbose=verbose)
        both = _blocks(format_tables(pd.DataFrame(builtin + ring), verbose=verbose))
        assert list(both) == ["all_gather builtin", "all_gather ring", "ring vs builtin all_gather"]
        ratios = [line.split()[6] for line in both["ring vs builtin all_gather"] if not line.startswith("#")]
        assert ratios == ["2.000", "2.000"]


def _nccl_row(size: int, *, issue_us: float, covered: bool, busbw: float = 1.0) -> dict:
    from commbench.measure.spin_plan import is_host_bound
    from commbench.sweep.host_issue import host_bound_word

    row = _row(size=size, busbw=busbw, backend="nccl", device="cuda")
    bound = is_host_bound(issue_us * 1e-6, row["time_us_p50"] * 1e-6, covered)
    row.update(issue_us_per_call=issue_us, spin_covered=covered, host_bound=host_bound_word(bound))
    return row


@pytest.mark.parametrize("verbose", [False, True])
def test_host_bound_rows_are_flagged_in_a_word_and_summed_up_once(verbose):
    """Rows whose issue reached 0.8 × their time (or whose spin ended first) are flagged; the others are not; one
    line under the tables says how many, and the largest issue time."""
    rows = pd.DataFrame([_nccl_row(8, issue_us=25.0, covered=True),  # 8 B at 2 ns: host-bound
                         _nccl_row(64 * MIB, issue_us=25.0, covered=True, busbw=100.0),  # 335 µs: ahead
                         _nccl_row(MIB, issue_us=5.0, covered=False, busbw=100.0)])  # a spin ended first
    table = format_tables(rows, verbose=verbose)
    flagged = [line for line in table.splitlines() if "host-bound" in line and not line.startswith("#")]
    assert [line.split()[0] for line in flagged] == ["8", "1048576"], table
    [summary] = [line for line in table.splitlines() if line.startswith("# host-bound:")]
    assert "2 of 3 points (8 B, 1 MiB)" in summary and "up to 25.0 µs" in summary
    assert "at 1 a spin ended before the last call was issued" in summary


def test_rows_the_device_kept_ahead_of_say_so_and_gloo_rows_say_nothing_in_the_short_table():
    ahead = pd.DataFrame([_nccl_row(64 * MIB, issue_us=25.0, covered=True, busbw=100.0)])
    assert "# host issue: the device stayed ahead of the host at all 1 points (issue up to 25.0 µs" in \
        format_tables(ahead)
    gloo = pd.DataFrame([_row(size=MIB, issue_us_per_call=None, spin_covered=None, host_bound="not applicable")])
    assert "host" not in format_tables(gloo).split("# ±CI")[1]
    assert "# host issue: not applicable, gloo's calls block the host until done" in format_tables(gloo, verbose=True)
    imported = pd.DataFrame([_row(size=MIB, host_bound="")])  # rows that recorded nothing: no line at all
    assert "host issue" not in format_tables(imported, verbose=True)
