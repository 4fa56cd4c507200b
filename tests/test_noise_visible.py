"""Noise made visible in the terminal tables: the median's 95 % CI per cell with wide ones flagged, the ring/builtin
ratio's range, and training configurations that the step time's noise cannot rank marked as ties."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from commbench.benches.collective import RESULT_COLUMNS as COLLECTIVE_COLUMNS
from commbench.benches.training import RESULT_COLUMNS as TRAINING_COLUMNS
from commbench.measure.stats import summarize
from commbench.sweep.table import format_tables
from commbench.sweep.table_cells import NOISY_CI_PCT, ci_half_width_pct
from commbench.training.table import best_config, format_training_table, key_numbers, tied_configs
from tests.report_runs import shared_report_suite

FLAG = "<-- "  # the verbose tables' flags, and a wrong result in the short ones
SHORT_HEAD = ["size (B)", "count (elements)", "type", "redop", "root", "time (us)", "±CI (%)", "algbw (GB/s)",
              "busbw (GB/s)", "% of expected", "#wrong"]
EXPECTED = SHORT_HEAD.index("% of expected")


def _collective_row(impl="builtin", size=4096, inplace=False, p50=100.0, lo=95.0, hi=105.0, n_wrong=0):
    row = dict.fromkeys(COLLECTIVE_COLUMNS)
    busbw = size / (p50 * 1e-6) / 1e9
    row.update(schema_version=1, run_id="hand", bench="collective", collective="all_gather", impl=impl,
               backend="gloo", device="cpu", world_size=2, dtype="float32", op="none", inplace=inplace,
               size_bytes=size, count=size // 8, iters=20, warmup=5, stop_reason="iters", timing="per-iteration",
               time_us_p50=p50, time_us_p95=hi * 1.1, time_us_min=lo * 0.9, time_us_mean=p50,
               time_us_ci_lo=lo, time_us_ci_hi=hi, algbw_gbps=busbw * 2, busbw_gbps=busbw, n_wrong=n_wrong)
    return row


def _data_lines(table: str, title: str) -> list[str]:
    """The data lines of the table that has a title line starting with `title`."""
    [block] = [part for part in table.split("\n\n") if any(line.startswith(title) for line in part.splitlines())]
    return [line for line in block.splitlines() if not line.startswith("#")]


def _cells(line: str) -> list[str]:
    return line.split(FLAG)[0].split()


def _short_cells(line: str, placements: int = 1) -> tuple[list[str], str]:
    """A short table's row: its values (5 key columns, 6 per placement measured) and the flags after them."""
    parts = line.split()
    columns = 5 + 6 * placements
    return parts[:columns], " ".join(parts[columns:])


# the cases of the issue: a 2 KiB point with scheduler stalls, the all_gather point with p50 4,047 us, min 239 us and
# CI 258–4,291 us, tight points, a point just either side of the threshold, one without a CI, and one whose
# half-width passes 1000 % (a median at the minimum, one stall as the upper bound)
CASES = {1024: (100.0, 98.0, 103.0), 2048: (7900.0, 7000.0, 8000.0), 4096: (4047.0, 258.0, 4291.0),
         8192: (200.0, 181.0, 210.0), 16384: (200.0, 179.0, 201.0), 32768: (50.0, math.nan, math.nan),
         65536: (239.0, 239.0, 4291.0)}


def _hand_rows() -> pd.DataFrame:
    return pd.DataFrame([_collective_row(size=size, p50=p50, lo=lo, hi=hi) for size, (p50, lo, hi) in CASES.items()])


@pytest.fixture(scope="module")
def hand_table() -> str:
    """The verbose table (--verbose): nccl-tests' layout, both placement groups."""
    return format_tables(_hand_rows(), verbose=True)


@pytest.fixture(scope="module")
def short_table() -> str:
    """The default table: the out-of-place columns only (no in-place row was measured)."""
    return format_tables(_hand_rows())


def _assert_half_width(text: str, size: int) -> None:
    p50, lo, hi = CASES[size]
    if math.isnan(lo):
        assert text == "n/a"
        return
    half_width = max(p50 - lo, hi - p50) / p50 * 100
    assert float(text) == pytest.approx(half_width, abs=0.05 if half_width < 1000 else 0.5)


@pytest.mark.no_process
def test_the_ci_column_holds_each_medians_half_width(hand_table, short_table):
    lines = _data_lines(hand_table, "# all_gather (builtin")
    assert len(lines) == len(CASES)
    for line in lines:
        cells = _cells(line)
        # out of place: size count type redop root, then time p50, ±CI; in place is all "-"
        assert float(cells[5]) == CASES[int(cells[0])][0]
        _assert_half_width(cells[6], int(cells[0]))
        assert cells[10:] == ["-"] * 5
    lines = _data_lines(short_table, "# all_gather (builtin, out-of-place)")
    assert len(lines) == len(CASES)
    for line in lines:
        values, _ = _short_cells(line)
        assert len(values) == len(SHORT_HEAD)
        assert values[EXPECTED] == "-"  # the hand-made rows carry no expected busbw
        assert "-" not in values[:EXPECTED] + values[EXPECTED + 1:]  # no column group for the unmeasured in-place
        assert float(values[5]) == CASES[int(values[0])][0]
        _assert_half_width(values[6], int(values[0]))


@pytest.mark.no_process
def test_only_rows_wider_than_ten_percent_are_flagged_noisy(hand_table, short_table):
    flagged = {}
    for line in _data_lines(hand_table, "# all_gather (builtin"):
        flagged[int(line.split()[0])] = line.split(FLAG)[1] if FLAG in line else None
    assert flagged[1024] is None and flagged[8192] is None  # ±5 % and ±9.5 %
    assert flagged[2048] == "noisy (95 % CI ±11.4 %)"
    assert flagged[4096] == "noisy (95 % CI ±93.6 %)"
    assert flagged[16384] == "noisy (95 % CI ±10.5 %)"
    assert flagged[32768] == "noise unknown (no 95 % CI)"
    assert flagged[65536] == "noisy (95 % CI ±1695 %)"
    legend = [line for line in hand_table.splitlines() if line.startswith(("# ±CI", "# noisy ="))]
    assert len(legend) == 2
    assert "(4 of 7 rows, 1 unknown)" in legend[1] and "--iters" in legend[1] and "--target-ci" in legend[1]
    # the short table: the same rows flagged, in a word; the noise said once, under the tables
    short = {int(line.split()[0]): _short_cells(line)[1] for line in _data_lines(short_table, "# all_gather")}
    assert short == {1024: "", 2048: "noisy", 4096: "noisy", 8192: "", 16384: "noisy", 32768: "no CI",
                     65536: "noisy"}
    [summary] = [line for line in short_table.splitlines() if "±CI (%) = half-width" in line]
    assert short_table.splitlines()[-1] == summary
    assert "5 of 7 points (1 without a CI)" in summary and "over ±10 %" in summary
    assert "--iters" in summary and "--target-ci 10 --max-time S" in summary and "run set" in summary


@pytest.mark.no_process
def test_the_columns_stay_aligned_with_their_headers(hand_table, short_table):
    block = hand_table.split("\n\n")[0].splitlines()
    heads, units = block[2], block[3]
    assert heads.count("±CI") == 2 and units.count("(%)") == 2
    for line in _data_lines(hand_table, "# all_gather (builtin"):
        body = line.split(FLAG)[0].rstrip()
        assert len(body) == len(heads) == len(units)
        # every value ends where its header ends (right-aligned columns; titles are 2+ spaces apart)
        ends = [match.end() - 1 for match in re.finditer(r"\S+(?: \S+)*", heads[1:])]
        assert all(body[end + 1] != " " and body[end + 2:end + 3] in ("", " ") for end in ends), (body, heads)
    # the short table: one header line, a unit in every title that has one
    heads = short_table.splitlines()[1]
    assert re.findall(r"\S+(?: \S+)*", heads[1:]) == SHORT_HEAD
    ends = [match.end() + 1 for match in re.finditer(r"\S+(?: \S+)*", heads[1:])]
    for line in _data_lines(short_table, "# all_gather"):
        values, _ = _short_cells(line)
        assert [match.end() for match in re.finditer(r"\S+", line)][:len(values)] == ends, (line, heads)


@pytest.mark.no_process
def test_wrong_and_noisy_flags_share_the_line():
    rows = pd.DataFrame([_collective_row(p50=100.0, lo=50.0, hi=101.0, n_wrong=3),
                         _collective_row(size=8192, p50=100.0, lo=99.0, hi=101.0, n_wrong=1)])
    lines = _data_lines(format_tables(rows, verbose=True), "# all_gather")
    assert lines[0].endswith("   <-- WRONG RESULT; noisy (95 % CI ±50.0 %)")
    assert lines[1].endswith("   <-- WRONG RESULT")
    # the short table keeps a wrong result as loud
    lines = _data_lines(format_tables(rows), "# all_gather")
    assert lines[0].endswith("   <-- WRONG RESULT; noisy") and lines[1].endswith("   <-- WRONG RESULT")


@pytest.mark.no_process
def test_the_widest_placement_decides_a_rows_flag():
    rows = pd.DataFrame([_collective_row(inplace=False, p50=100.0, lo=99.0, hi=101.0),
                         _collective_row(inplace=True, p50=100.0, lo=80.0, hi=101.0)])
    [line] = _data_lines(format_tables(rows, verbose=True), "# all_gather")
    cells = _cells(line)
    assert cells[6] == "1.0" and cells[10:12] == ["100.00", "20.0"]
    assert line.endswith("<-- noisy (95 % CI ±20.0 %)")
    short = format_tables(rows)
    [line] = _data_lines(short, "# all_gather (builtin, out-of-place and in-place)")
    values, flags = _short_cells(line, placements=2)
    assert values[6] == "1.0" and values[11:13] == ["100.00", "20.0"] and flags == "noisy"
    assert "1 of 2 points" in short.splitlines()[-1]  # a point is a placement's row: only in-place is noisy


@pytest.mark.no_process
def test_the_half_width_is_the_one_adaptive_sampling_aims_at():
    samples = np.random.default_rng(3).lognormal(5.0, 0.4, size=40)
    summary = summarize(samples)
    row = {"time_us_p50": summary.p50, "time_us_ci_lo": summary.ci_lo, "time_us_ci_hi": summary.ci_hi}
    assert ci_half_width_pct(row) == pytest.approx(summary.ci_half_width_pct)
    assert math.isnan(ci_half_width_pct({"time_us_p50": 0.0, "time_us_ci_lo": 0.0, "time_us_ci_hi": 0.0}))
    assert math.isnan(ci_half_width_pct({"time_us_p50": 10.0}))  # a file from before the CI columns


def _ratio_table(pairs: dict, *, verbose: bool = True) -> dict:
    """size → the ring vs builtin line, for {size: ((builtin p50, lo, hi), (ring p50, lo, hi))}."""
    rows = []
    for size, (builtin, ring) in pairs.items():
        rows.append(_collective_row("builtin", size, False, *builtin))
        rows.append(_collective_row("ring", size, False, *ring))
    lines = _data_lines(format_tables(pd.DataFrame(rows), verbose=verbose), "# ring vs builtin")
    return {int(line.split()[0]): line for line in lines}


RATIO_CASES = {
    1024: ((100.0, 98.0, 102.0), (50.0, 49.0, 51.0)),        # ring 2x faster, tight: ~1.92–2.08
    2048: ((100.0, 97.0, 103.0), (104.0, 101.0, 106.0)),      # 0.962, range 0.915–1.020 contains 1
    4096: ((239.0, 230.0, 250.0), (6600.0, 6000.0, 7900.0)),  # the ring's scheduler stall: wide
    8192: ((100.0, 99.0, 101.0), (100.0, 99.0, 101.0)),       # equal: contains 1, the estimate says 1 too
    16384: ((100.0, math.nan, math.nan), (90.0, 88.0, 92.0)),  # no CI on one side
}


@pytest.mark.no_process
@pytest.mark.parametrize("verbose", [True, False])
def test_the_ratio_range_pairs_opposite_ci_bounds(verbose):
    lines = _ratio_table(RATIO_CASES, verbose=verbose)
    for size, ((b_p50, b_lo, b_hi), (r_p50, r_lo, r_hi)) in RATIO_CASES.items():
        cells = _cells(lines[size])
        assert float(cells[6]) == pytest.approx(b_p50 / r_p50, abs=5e-4)  # ring/builtin busbw = t_builtin / t_ring
        if math.isnan(b_lo):
            assert cells[7] == "n/a"
            continue
        low, high = cells[7].split("–")
        assert float(low) == pytest.approx(b_lo / r_hi, abs=5e-4)
        assert float(high) == pytest.approx(b_hi / r_lo, abs=5e-4)


@pytest.mark.no_process
def test_ratio_rows_are_flagged_when_wide_or_not_distinguishable_from_one():
    lines = _ratio_table(RATIO_CASES)
    flags = {size: line.split(FLAG)[1] if FLAG in line else None for size, line in lines.items()}
    assert flags[1024] is None and flags[8192] is None
    assert flags[2048] == "not distinguishable from 1 (range contains 1.000)"
    assert flags[4096].startswith("noisy (ratio range ±") and "not distinguishable" not in flags[4096]
    assert flags[16384].startswith("noise unknown")
    short = {size: " ".join(line.split()[8:]) for size, line in _ratio_table(RATIO_CASES, verbose=False).items()}
    assert short == {1024: "", 2048: "1 in range", 4096: "noisy", 8192: "", 16384: "no CI"}
    pair = pd.DataFrame([_collective_row("builtin"), _collective_row("ring")])
    title = [line for line in format_tables(pair, verbose=True).splitlines() if line.startswith("# ring vs builtin")][0]
    assert "95 % CIs combined conservatively" in title
    assert NOISY_CI_PCT == 10


def _training_rows(cases: list[dict]) -> pd.DataFrame:
    rows = []
    for index, case in enumerate(cases):
        row = dict.fromkeys(TRAINING_COLUMNS)
        accum = case.get("accum", 1)
        p50 = case["p50"]
        row.update(schema_version=1, run_id="hand", bench="ddp", config_index=index, config=f"c{index}",
                   strategy="ddp", impl="ddp", backend="gloo", device="cpu", world_size=2, model_kind="mlp",
                   params=1e6, micro_batch=1, accum_steps=accum, global_batch=2 * accum,
                   bucket_cap_mb=case["bucket"], step_time_ms_p50=p50, step_time_ms_p95=p50 * 1.2,
                   step_time_ms_ci_lo=case["lo"], step_time_ms_ci_hi=case["hi"],
                   samples_per_s=2 * accum / (p50 / 1e3), comm_ms=1.0, exposed_comm_ms=0.5,
                   exposed_comm_ms_nosync=0.6, overlap_pct=50.0, peak_mem_bytes=2**29, model_state_bytes=2**24,
                   model_state_bytes_predicted=2**24, fits=case.get("fits", True), n_wrong=case.get("n_wrong", 0))
        rows.append(row)
    return pd.DataFrame(rows)


TRAINING_CASES = [
    {"bucket": 1, "p50": 100.0, "lo": 96.0, "hi": 104.0},    # the winner
    {"bucket": 5, "p50": 106.0, "lo": 103.0, "hi": 110.0},   # overlaps the winner's CI: a tie
    {"bucket": 10, "p50": 110.0, "lo": 105.0, "hi": 115.0},  # tight against the winner, not overlapping
    {"bucket": 25, "p50": 101.0, "lo": 99.0, "hi": 103.0, "fits": False},  # overlaps, does not fit: no tie
    {"bucket": 50, "p50": 102.0, "lo": 99.0, "hi": 103.0, "n_wrong": 1},   # overlaps, wrong: no tie
    {"bucket": 100, "p50": 300.0, "lo": math.nan, "hi": math.nan},        # no CI: unknown
]


@pytest.mark.no_process
def test_ties_are_exactly_the_eligible_configurations_whose_cis_overlap_the_best():
    results = _training_rows(TRAINING_CASES)
    best = best_config(results)
    assert best.name == 0  # the single winner is still the highest samples/s
    ties, unknown = tied_configs(results, best)
    assert ties == [1] and unknown == [5]
    assert list(key_numbers(results)["best"]) == ["◀ best", "◀ tie", "", "", "", ""]


@pytest.mark.no_process
def test_the_best_line_names_every_tied_configuration():
    table = format_training_table(_training_rows(TRAINING_CASES))
    [best_line] = [line for line in table.splitlines() if line.startswith("# best:")]
    assert best_line.startswith("# best: ddp cap 1 MiB — 20.0 samples/s, step 100.0 ms (95 % CI 96.0–104.0)")
    assert "not significantly faster than ddp cap 5 MiB (95 % CIs of the step time overlap: a tie" in best_line
    assert "no 95 % CI to compare with: ddp cap 100 MiB" in best_line
    lines = table.splitlines()
    assert "p50 95% CI" in lines[0] and lines[1].split().count("(ms)") == 4  # step p50, CI, comm, exposed
    assert [line.split()[4] for line in lines[2:8]] == ["fp32"] * 6  # each row's precision, beside its label
    assert [line.split()[6] for line in lines[2:8]] == ["96.0–104.0", "103.0–110.0", "105.0–115.0", "99.0–103.0",
                                                         "99.0–103.0", "n/a"]


@pytest.mark.no_process
def test_no_tie_without_overlap_and_the_markers_stay_in_the_best_column():
    results = _training_rows(TRAINING_CASES[:1] + TRAINING_CASES[2:3])  # winner and a tight loser
    assert tied_configs(results, best_config(results)) == ([], [])
    table = format_training_table(results)
    assert "not significantly faster" not in table and "tied with" not in table
    numbers = key_numbers(results)
    assert list(numbers["best"]) == ["◀ best", ""]
    assert list(numbers["step p50 95% CI (ms)"]) == ["96.0–104.0", "105.0–115.0"]


@pytest.mark.no_process
def test_accumulation_compares_the_time_per_sample():
    # accum 4 takes 8 samples per step (2 ranks): its step-time CI, 380–420 ms, is 47.5–52.5 ms per sample, which
    # overlaps the winner's 48–52 ms (96–104 ms for 2 samples); in raw step time the two would never overlap
    results = _training_rows([TRAINING_CASES[0], {"bucket": 1, "accum": 4, "p50": 404.0, "lo": 380.0, "hi": 420.0}])
    assert best_config(results).name == 0
    assert tied_configs(results, best_config(results)) == ([1], [])


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """A real 2-rank sweep, builtin and ring at three sizes (the report tests' shared suite), and its rows."""
    from commbench.benches.collective import KIND
    from commbench.store import read_results

    return read_results(shared_report_suite(tmp_path_factory) / "collective", KIND)


@pytest.mark.distributed
def test_a_real_sweep_prints_a_ci_for_every_row_and_the_legend(real_sweep):
    results = real_sweep
    short, verbose = format_tables(results), format_tables(results, verbose=True)
    noisy = 0
    for impl in ("builtin", "ring"):
        # all_reduce runs in place only: the short table has the in-place columns alone, the verbose one both
        short_lines = _data_lines(short, f"# all_reduce ({impl}, in-place)")
        verbose_lines = _data_lines(verbose, f"# all_reduce ({impl}")
        assert len(short_lines) == len(verbose_lines) == 3
        for short_line, verbose_line in zip(short_lines, verbose_lines):
            values, flags = _short_cells(short_line)
            row = results[(results["impl"] == impl) & (results["size_bytes"] == int(values[0]))].iloc[0]
            expected = max(row["time_us_p50"] - row["time_us_ci_lo"], row["time_us_ci_hi"] - row["time_us_p50"])
            half_width = expected / row["time_us_p50"] * 100
            # one decimal below 1000 %, whole percent above (the column's 6 characters)
            for text in (values[6], _cells(verbose_line)[11]):
                assert float(text) == pytest.approx(half_width, abs=0.05 if half_width < 1000 else 0.5)
            assert (flags == "noisy") == (half_width > NOISY_CI_PCT)
            assert (FLAG in verbose_line) == (half_width > NOISY_CI_PCT)
            noisy += half_width > NOISY_CI_PCT
    assert verbose.count("# ±CI = half-width of the median time's 95 % CI") == 2
    summaries = [line for line in short.splitlines() if "±CI (%) = half-width" in line]
    assert len(summaries) == 1 and (f"{noisy} of 6 points" in summaries[0] or (noisy == 0 and "all 6" in summaries[0]))
    for table in (short, verbose):
        ratio_lines = _data_lines(table, "# ring vs builtin")
        assert len(ratio_lines) == 3 and all("–" in _cells(line)[7] for line in ratio_lines)


@pytest.mark.no_process
def test_the_reports_key_numbers_count_the_noisy_points_of_every_size():
    from commbench.benches.collective import KIND

    rows = [_collective_row(size=size, p50=p50, lo=lo, hi=hi) for size, (p50, lo, hi) in CASES.items()]
    rows += [_collective_row(impl="ring", size=size) for size in CASES]  # ±5 %: none noisy
    numbers = KIND.key_numbers(pd.DataFrame(rows)).set_index("impl")
    noisy = numbers[f"noisy points (95 % CI > ±{NOISY_CI_PCT:g} % or none)"]
    # wider than ±10 %: 2, 4, 16 and 64 KiB; no CI: 32 KiB; tight: 1 and 8 KiB
    assert noisy["builtin"] == 5 and noisy["ring"] == 0
    assert (numbers["points"] == len(CASES)).all()
