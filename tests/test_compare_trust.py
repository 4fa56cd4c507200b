"""How far `commbench compare` can be trusted, said by compare itself: a note when a side is a single launch rather
than a run set, a wide-CI flag per row (and a note with the count), the change's direction in words, sizes in
KiB/MiB, and --json. Two real single-launch sweeps (2 sizes, few iterations) shared by every test."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.gate.priors import CPU_PRIOR
from commbench.gate.verdicts import WIDE_CI_PCT, change_text
from tests.in_process import commbench_here

SWEEP = ("-c", "all_reduce", "--impl", "builtin", "--sizes", "4K,64K", "--iters", "8", "--warmup", "2")
SIZE_LABELS = ("4 KiB", "64 KiB")


@pytest.fixture(scope="module")
def launches(tmp_path_factory) -> dict[str, Path]:
    """Two launches of the same sweep, back to back ("a", "b"), and run sets of both ("set_ab", "set_ba": copies of
    the two real launches, two per set, in either order)."""
    out = tmp_path_factory.mktemp("launches")
    for run_id in ("a", "b"):
        completed = commbench_here("sweep", "--backend", "gloo", "--device", "cpu", *SWEEP, "--out", str(out),
                                   "--run-id", run_id, "--quiet")
        assert completed.returncode == 0, completed.stderr[-2000:]
    for name, order in (("set_ab", "ab"), ("set_ba", "ba")):
        for index, run_id in enumerate(order, start=1):
            shutil.copytree(out / run_id, out / name / f"launch{index}")
    return {name: out / name for name in ("a", "b", "set_ab", "set_ba")}


def _json(commbench_cli, *args: str):
    outcome = commbench_cli("compare", *map(str, args), "--json")
    return outcome, json.loads(outcome.stdout)


def _notes(text: str) -> str:
    """The terminal's note block as one paragraph (it is wrapped over "#       " lines)."""
    lines = [line.removeprefix("#").strip() for line in text.splitlines() if line.startswith("# ")]
    return " ".join(lines)


@pytest.mark.distributed
def test_single_launches_are_noted_and_run_sets_are_not(launches, commbench_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COMMBENCH_CACHE_DIR", str(tmp_path / "cache"))  # no launch noise stored: the CPU prior
    single = commbench_cli("compare", str(launches["a"]), str(launches["b"]), "--markdown", str(tmp_path / "g.md"))
    assert "note: single launches: the baseline and the new side are one run folder each" in _notes(single.stdout)
    assert "run the same sweep or suite with --launches 3 (or more) on both sides" in _notes(single.stdout)
    assert f"The floor takes {CPU_PRIOR.noise_pct:.1f} % launch noise from the prior for CPU ranks" \
        in _notes(single.stdout)
    assert "- single launches: the baseline and the new side" in (tmp_path / "g.md").read_text()
    one_side = commbench_cli("compare", str(launches["set_ab"]), str(launches["b"]))
    assert ("single launch: the new side is one run folder, not a run set (the baseline is a run set of 2)"
            in _notes(one_side.stdout)), one_side.stdout
    sets = commbench_cli("compare", str(launches["set_ab"]), str(launches["set_ba"]))
    assert "single launch" not in sets.stdout and sets.returncode == 0, sets.stdout + sets.stderr
    _, document = _json(commbench_cli, launches["set_ab"], launches["set_ba"])
    assert document["launches"] == {"baseline": 2, "new": 2}
    assert not any("single launch" in note for note in document["notes"])


def _half_width_pct(results: pd.DataFrame, size: int) -> float:
    row = results[results["size_bytes"] == size].iloc[0]
    median, low, high = row["time_us_p50"], row["time_us_ci_lo"], row["time_us_ci_hi"]
    return max(median - low, high - median) / median * 100 if math.isfinite(low + high) else math.inf


@pytest.mark.distributed
def test_the_wide_ci_flag_follows_each_sides_stored_interval(launches, commbench_cli):
    _, document = _json(commbench_cli, launches["a"], launches["b"], "--fail", "busbw:5%,time:5%")
    results = {side: store.read_results(launches[side], COLLECTIVE) for side in ("a", "b")}
    figures = [entry for entry in document["entries"] if entry["ratio"] is not None]
    assert len(figures) == 4  # 2 sizes × busbw and time
    for entry in figures:
        size = 4096 if entry["row"].endswith(" 4 KiB") else 65536
        widths = {"baseline": _half_width_pct(results["a"], size), "new": _half_width_pct(results["b"], size)}
        expected = [side for side, width in widths.items() if width > WIDE_CI_PCT]
        assert entry["wide_ci_sides"] == expected and entry["wide_ci"] is bool(expected), (entry, widths)
    wide = sum(entry["wide_ci"] for entry in figures)
    counted = [note for note in document["notes"] if "CI (of the median) wider than ±10 %" in note]
    assert (f"{wide} of 4 rows" in counted[0]) if wide else not counted, document["notes"]


@pytest.mark.distributed
def test_the_wide_ci_column_on_edited_intervals(launches, commbench_cli, tmp_path):
    """The formatting rule on intervals set by hand (edited copies of the real runs, saying so): the 4 KiB row's CI
    ±1 % on both sides, the 64 KiB row's ±50 % on the new side only."""
    edited = {}
    for side, wide_half in (("a", 0.01), ("b", 0.5)):
        edited[side] = tmp_path / side
        shutil.copytree(launches[side], edited[side])
        path = edited[side] / store.RESULTS_FILE
        frame = store.read_rows(path, ["schema_version"])
        for size, half in ((4096, 0.01), (65536, wide_half)):
            rows = frame["size_bytes"] == size
            frame.loc[rows, "time_us_ci_lo"] = frame.loc[rows, "time_us_p50"] * (1 - half)
            frame.loc[rows, "time_us_ci_hi"] = frame.loc[rows, "time_us_p50"] * (1 + half)
        frame.to_csv(path, index=False)
    text = commbench_cli("compare", str(edited["a"]), str(edited["b"]))
    flags = {line.split(" busbw ")[0].strip(): line.split()[-2] for line in text.stdout.splitlines()
             if " busbw " in line}
    assert flags == {"all_reduce builtin float32 sum in 4 KiB": "no",
                     "all_reduce builtin float32 sum in 64 KiB": "new"}, text.stdout
    assert "1 of 2 rows has a 95 % CI (of the median) wider than ±10 % on a side" in _notes(text.stdout)


@pytest.mark.no_process
def test_change_text_says_the_direction_in_words():
    assert change_text(12.34) == "12.3 % worse" and change_text(-5.06) == "5.1 % better"
    assert change_text(0.04) == change_text(-0.04) == change_text(0.0) == "0.0 %"
    assert change_text(-1899.5) == "1899.5 % better"


@pytest.mark.distributed
def test_the_change_column_agrees_with_the_sign_of_worse_pct(launches, commbench_cli):
    for baseline, new in (("a", "b"), ("b", "a")):
        text = commbench_cli("compare", str(launches[baseline]), str(launches[new]), "--fail", "busbw:5%,time:5%")
        _, document = _json(commbench_cli, launches[baseline], launches[new], "--fail", "busbw:5%,time:5%")
        figures = [entry for entry in document["entries"] if entry["ratio"] is not None]
        assert len(figures) == 4
        for entry in figures:
            worse = entry["worse_pct"]
            direction = "worse" if round(worse, 1) > 0 else "better" if round(worse, 1) < 0 else None
            assert entry["change"] == (f"{abs(worse):.1f} % {direction}" if direction else "0.0 %"), entry
            line = next(line for line in text.stdout.splitlines()
                        if line.startswith(entry["row"] + " ") and f" {entry['metric']} " in line)
            assert f" {entry['change']} " in line, line
        assert "change" in text.stdout.splitlines()[0] and "(% of b)" in text.stdout.splitlines()[1]


@pytest.mark.no_process
def test_collective_labels_show_sizes_in_binary_units_and_stay_unique():
    base = {"collective": "all_reduce", "impl": "builtin", "dtype": "float32", "op": "sum", "inplace": False,
            "timing": "batch"}
    sizes = (1000, 1024, 1536, 65536, 1048576, 16 * 1048576, 1048576 + 1)
    labels = [COLLECTIVE.row_label(pd.Series({**base, "size_bytes": size})) for size in sizes]
    assert labels[:2] == ["all_reduce builtin float32 sum out 1000 B", "all_reduce builtin float32 sum out 1 KiB"]
    assert labels[4:6] == ["all_reduce builtin float32 sum out 1 MiB", "all_reduce builtin float32 sum out 16 MiB"]
    assert len(set(labels)) == len(sizes) and all("\n" not in label for label in labels)
    # the default timing goes unsaid; the other mode is named, so a row of each stays apart
    assert COLLECTIVE.row_label(pd.Series({**base, "size_bytes": 1024, "timing": "per-iteration"})) == \
        "all_reduce builtin float32 sum out 1 KiB per-iteration"


@pytest.mark.distributed
def test_run_labels_show_sizes_in_kib(launches, commbench_cli):
    _, document = _json(commbench_cli, launches["a"], launches["b"])
    rows = {entry["row"] for entry in document["entries"]}
    assert {" ".join(row.split()[-2:]) for row in rows} == set(SIZE_LABELS), rows


@pytest.mark.distributed
def test_json_is_one_document_with_the_text_modes_exit_code(launches, commbench_cli, tmp_path):
    missing = tmp_path / "missing"  # b without its 64 KiB row: the gate fails (exit 1) on a row the new side lacks
    shutil.copytree(launches["b"], missing)
    results = missing / store.RESULTS_FILE
    results.write_text("\n".join(line for line in results.read_text().splitlines() if ",65536," not in line) + "\n")
    for new, expected in ((launches["b"], None), (missing, 1)):
        text = commbench_cli("compare", str(launches["a"]), str(new))
        outcome, document = _json(commbench_cli, launches["a"], new)
        assert outcome.returncode == text.returncode and (expected is None or outcome.returncode == expected)
        assert document["gate"]["passed"] is (outcome.returncode == 0)
        assert document["gate"]["line"] == text.stdout.splitlines()[-1].removeprefix("# ")
        assert document["thresholds_pct"]["busbw"] == 5.0 and document["notes"]
        assert all(f"commbench: note: {note}" in outcome.stderr for note in document["notes"])
        for entry in document["entries"]:
            assert {"row", "metric", "baseline", "new", "ratio", "worse_pct", "change", "p_value", "verdict",
                    "wide_ci"} <= set(entry)
    assert any(entry["verdict"] == "missing" and entry["row"].endswith(" 64 KiB") for entry in document["entries"])
