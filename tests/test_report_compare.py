"""`commbench report` (plots, HTML checked in headless Chromium, Markdown) and `commbench compare` (the gate)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from commbench import store
from commbench.gate.sides import run_folders
from commbench.runs import load_run
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke
from tests.report_runs import ARTIFACTS, CHROMIUM_FLAGS, SIZES, needs_chromium, shared_report_suite

GATE_SWEEP = ("-c", "all_reduce", "--impl", "builtin", "--sizes", "1M,4M", "--iters", "10")
"""Two sizes of 1 MiB and up, where a call moves data (its fastest time is no timer artefact); the slowed run waits
20x its fastest call after each call (test_compare_passes_...), so bigger sizes cost 20x their own time there."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The suite's run folder: runs / "collective", runs / "ddp" and runs / "zero" are its benches' run folders."""
    return shared_report_suite(tmp_path_factory)


@pytest.mark.distributed
def test_report_draws_every_plot_with_data_and_writes_html_and_markdown(runs, tmp_path, commbench_cli):
    completed = commbench_cli("report", str(runs), "--out", str(tmp_path / "report"))  # a suite: all its benches
    assert completed.returncode == 0, completed.stderr
    report = tmp_path / "report"
    for stem in ("busbw_vs_size", "latency_fit", "ring_vs_builtin", "ddp_buckets", "strategy_steps_memory",
                 "model_state"):
        assert (report / f"{stem}.png").stat().st_size > 1000 and (report / f"{stem}.svg").exists()
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6 and "<img" in page
    assert "world_size" in page and "traces" in page.lower()  # metadata table and trace links
    summary = (report / "summary.md").read_text()
    assert "| collective | impl |" in summary and "mean busbw ≥ 1 MiB (GB/s)" in summary
    assert "step p50 (ms)" in summary and "◀ best" in summary


@pytest.mark.distributed
def test_report_names_the_plots_it_skips(runs, tmp_path, commbench_cli):
    completed = commbench_cli("report", str(runs / "collective"), "--out", str(tmp_path / "report"))
    assert completed.returncode == 0, completed.stderr
    # one line for the plots of kinds the run never had; -v names each and why
    assert "skipped" not in completed.stdout and "plot(s) not drawn" in completed.stdout, completed.stdout
    verbose = commbench_cli("report", str(runs / "collective"), "--out", str(tmp_path / "report"), "-v")
    assert "skipped DDP: step time by bucket size" in verbose.stdout
    assert "no DDP sweep (commbench ddp) among the runs" in verbose.stdout
    assert "skipped" in (tmp_path / "report" / "summary.md").read_text()


@pytest.mark.distributed
@needs_chromium
def test_report_html_loads_in_headless_chromium(runs, tmp_path, commbench_cli):
    commbench_cli("report", str(runs / "collective"), str(runs / "ddp"), str(runs / "zero"), "--out",
               str(tmp_path / "report"))
    page = (tmp_path / "report" / "report.html").as_uri()
    dom = subprocess.run(["chromium", *CHROMIUM_FLAGS, "--virtual-time-budget=5000", "--dump-dom", page],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's own check, run on load: every image decoded to a non-zero size, no script error or console.error
    assert 'data-images="6/6"' in dom.stdout, dom.stdout[:500]
    assert 'data-errors="0"' in dom.stdout
    assert "Uncaught" not in dom.stderr and ":CONSOLE(" not in dom.stderr
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "report-screenshot.png"
    shot = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--screenshot={screenshot}", "--window-size=1280,4000", page],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000


def _sweep(tmp_path: Path, run_id: str, *args: str, **env: str) -> Path:
    """A real gloo sweep on CPU, its CLI run in this process (tests/in_process.py: the same launch, without an
    interpreter start and a torch import); returns its run folder."""
    run = commbench_here("sweep", "--backend", "gloo", "--device", "cpu", *args, "--out", str(tmp_path / "results"),
                         "--run-id", run_id, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return tmp_path / "results" / run_id


@pytest.mark.distributed
def test_compare_passes_a_run_against_itself_and_catches_a_far_slower_run(tmp_path, commbench_cli):
    baseline = _sweep(tmp_path, "baseline", *GATE_SWEEP)
    same = commbench_cli("compare", str(baseline), str(baseline), "--markdown", str(tmp_path / "gate.md"))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "2 ok" in same.stdout and "REGRESSION" not in same.stdout
    assert "| all_reduce builtin float32 sum in 1 MiB | busbw (GB/s) |" in (tmp_path / "gate.md").read_text()
    # a run set (two copies of the run): medians unchanged, samples pooled
    for name in ("a", "b"):
        shutil.copytree(baseline, tmp_path / "set" / name)
    pooled = commbench_cli("compare", str(tmp_path / "set"), str(baseline))
    assert pooled.returncode == 0 and "2 ok" in pooled.stdout, pooled.stdout + pooled.stderr
    # every timed call waits 20x its fastest call (test-only switch), far beyond launch-to-launch noise (on a loaded
    # 2-core machine a point's median call reads up to several times its fastest, so a call made only twice as slow
    # can read faster than the baseline's): every row beyond 20 % worse, and the gate fails on rows whose samples
    # make it significant (one launch against one launch: launch-to-launch noise can leave one row `~`).
    # --launch-noise 0: no launch-noise floor, the samples decide (the default floor of two single launches on a
    # shared 2-core machine is wider; tests/test_run_sets.py covers the floor)
    slow = _sweep(tmp_path, "slow", *GATE_SWEEP, COMMBENCH_SLOWDOWN_PCT="2000")
    gate = commbench_cli("compare", str(baseline), str(slow), "--fail", "busbw:20%", "--launch-noise", "0")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    rows = [line for line in gate.stdout.splitlines() if " busbw " in line]
    assert len(rows) == 2 and all(" % worse " in row for row in rows), gate.stdout  # the direction, in words
    as_json = commbench_cli("compare", str(baseline), str(slow), "--fail", "busbw:20%", "--launch-noise", "0",
                            "--json")
    assert as_json.returncode == 1, as_json.stdout + as_json.stderr
    entries = [entry for entry in json.loads(as_json.stdout)["entries"] if entry["metric"] == "busbw"]
    assert len(entries) == 2 and all(entry["ratio"] < 0.8 and entry["worse_pct"] > 20 for entry in entries), entries
    regressions = [entry for entry in entries if entry["verdict"] == "REGRESSION"]
    assert regressions and all(entry["p_value"] < 0.01 for entry in regressions)


@pytest.mark.distributed
def test_compare_calls_out_rows_that_cannot_be_compared(runs, tmp_path, commbench_cli):
    baseline = runs / "collective"  # all_reduce, builtin and ring, three sizes: 6 rows
    # one rank and one of the baseline's points: no row at another world size joins any row of the baseline (a rank
    # is a torch import; the least a world size other than the baseline's 2 can cost)
    one_rank = _sweep(tmp_path, "one_rank", "-c", "all_reduce", "--sizes", SIZES.split(",")[0], "--iters", "6",
                      "--impl", "builtin", "--nproc", "1")
    other_dtype = _sweep(tmp_path, "other_dtype", "-c", "all_reduce", "--sizes", SIZES, "--iters", "6", "--impl",
                         "builtin,ring", "--dtype", "bfloat16")  # the baseline's 6 points, each in another dtype
    # no row of one was measured as any row of the other: nothing to compare, refused in one line
    gate = commbench_cli("compare", str(baseline), str(one_rank))
    assert gate.returncode == 2 and gate.stderr.count("\n") == 1, gate.stdout + gate.stderr
    assert "nothing to compare" in gate.stderr and "world size 2 vs 1" in gate.stderr, gate.stderr
    gate = commbench_cli("compare", str(baseline), str(other_dtype))
    assert gate.returncode == 1  # the baseline's rows are missing from the new run: the gate cannot pass them
    # summed up, a line per reason; -v lists every row
    assert "# missing: 6 row(s) of the baseline have no counterpart in the new run: dtype float32 vs bfloat16" \
        in gate.stdout, gate.stdout
    assert "# new: 6 row(s) of the new run are not in the baseline" in gate.stdout
    assert all(len(line) <= 200 for line in gate.stdout.splitlines())
    listed = commbench_cli("compare", str(baseline), str(other_dtype), "--verbose")
    assert listed.stdout.count("missing: not comparable: dtype float32 vs bfloat16") == 6
    assert listed.stdout.count("new: not comparable: dtype bfloat16 vs float32") == 6


@pytest.mark.distributed
def test_compare_training_runs_on_step_time_and_peak_memory(runs, commbench_cli):
    gate = commbench_cli("compare", str(runs / "ddp"), str(runs / "ddp"))
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert gate.stdout.count(" step_time ") == 2 and gate.stdout.count(" peak_mem ") == 2
    # step times have a CI (step_time_ms_ci_lo/_hi) that the wide-CI flag reads; peak memory has none
    entries = json.loads(commbench_cli("compare", str(runs / "ddp"), str(runs / "ddp"), "--json").stdout)["entries"]
    assert all((entry["wide_ci"] is None) == (entry["metric"] == "peak_mem") for entry in entries), entries


@pytest.mark.distributed
def test_compare_suite_runs_bench_by_bench(runs, tmp_path, commbench_cli):
    gate = commbench_cli("compare", str(runs), str(runs), "--fail", "busbw:5%,step_time:5%")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    lines = gate.stdout.splitlines()
    assert sum(line.startswith("[collective] all_reduce") and " busbw " in line for line in lines) == 6
    assert sum(line.startswith("[zero] strategy:") and " step_time " in line for line in lines) == 2
    # a suite without one of the benches: that bench is missing, not an error
    partial = tmp_path / "partial"
    shutil.copytree(runs, partial)
    meta = json.loads((partial / "meta.json").read_text())
    meta["benches"] = [bench for bench in meta["benches"] if bench["name"] != "ddp"]
    (partial / "meta.json").write_text(json.dumps(meta))
    gate = commbench_cli("compare", str(runs), str(partial), "--fail", "busbw:5%,step_time:5%")
    assert gate.returncode == 1 and "bench ddp" in gate.stdout and "missing: not in the new run" in gate.stdout
    accepted = commbench_cli("compare", str(runs), str(partial), "--fail", "busbw:5%,step_time:5%", "--allow-missing")
    assert accepted.returncode == 0 and "baseline row(s): bench ddp" in accepted.stdout, accepted.stdout
    # a suite run against a single run: compared through the suite's one bench of that kind, and said so
    paired = commbench_cli("compare", str(runs), str(runs / "collective"), "--json")
    assert paired.returncode == 0, paired.stdout + paired.stderr
    assert json.loads(paired.stdout)["notes"][0].startswith(
        f"the baseline {runs} is a suite run: its only collective bench, collective"), paired.stdout


def _corrupt(tmp_path: Path, source: Path, change) -> Path:
    target = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
    shutil.copytree(source, target)
    change(target)
    return target


@pytest.mark.distributed
def test_compare_refuses_bad_input_in_one_line(runs, tmp_path, commbench_cli):
    good = runs / "collective"

    def newer_schema(run_dir):
        text = (run_dir / "results.csv").read_text().splitlines()
        text[1] = "99" + text[1][text[1].index(","):]
        (run_dir / "results.csv").write_text("\n".join(text) + "\n")

    cases = {
        "is not a commbench results file": _corrupt(tmp_path, good, lambda d: (d / "results.csv").write_text(
            "name,value\na,1\n")),
        "samples.csv does not exist": _corrupt(tmp_path, good, lambda d: (d / "samples.csv").unlink()),
        "newer than this commbench reads": _corrupt(tmp_path, good, newer_schema),
        "has no samples for": _corrupt(tmp_path, good, lambda d: (d / "samples.csv").write_text(
            (d / "samples.csv").read_text().splitlines()[0] + "\n")),
        "cannot compare a collective run": runs / "ddp",
    }
    for message, new in cases.items():
        completed = commbench_cli("compare", str(good), str(new))
        assert completed.returncode == 2, (message, completed.stdout, completed.stderr)
        assert message in completed.stderr and completed.stderr.count("\n") == 1, completed.stderr
    # a run without rows: as the baseline it is bad input; as the new side it fails the gate (exit 1), naming the rows
    empty = _corrupt(tmp_path, good, lambda d: (d / "results.csv").write_text(
        (d / "results.csv").read_text().splitlines()[0] + "\n"))
    refused = commbench_cli("compare", str(empty), str(good))
    assert refused.returncode == 2 and "has no result rows" in refused.stderr, refused.stderr
    gate = commbench_cli("compare", str(good), str(empty))
    assert gate.returncode == 1 and "the new side misses 6 baseline row(s)" in gate.stdout, gate.stdout
    bad_threshold = commbench_cli("compare", str(good), str(good), "--fail", "latency:5")
    assert bad_threshold.returncode == 2 and "bad --fail 'latency:5'" in bad_threshold.stderr
    assert json.loads((good / "meta.json").read_text())["status"] == "complete"  # the source was not touched


@pytest.mark.no_process
def test_a_run_from_before_bench_kinds_is_read_as_its_kind():
    """The gate's first baseline (2026-11-29): meta.json without "kind", migrated from its rows."""
    gate = Path(__file__).parent / "data" / "suite_run_before_kinds" / "gate"
    assert "kind" not in json.loads((gate / "meta.json").read_text())
    run = load_run(gate)
    assert run.kind.name == "collective" and (run.results["n_wrong"] == 0).all()


@pytest.mark.no_process
def test_the_committed_baseline_is_a_set_of_commbench_runs_of_the_ci_suite():
    baseline = Path(__file__).parent.parent / "results" / "baselines" / "cpu-ci"
    folders = run_folders(baseline)
    assert len(folders) >= 3  # launches: the gate compares run sets
    suite_text = (Path(__file__).parent.parent / "suites" / "cpu-ci.toml").read_text()
    for folder in folders:
        assert store.read_meta(folder)["status"] == "complete"
        assert (folder / "suite.toml").read_text() == suite_text  # the gate runs what the baseline ran
        gate = store.suite_bench_dirs(folder)["gate"]
        run = load_run(gate)
        assert run.kind.name == "collective"
        results = run.results
        assert set(results["collective"]) == {"all_reduce"} and (results["n_wrong"] == 0).all()
        assert len(store.read_samples(gate, run.kind)) == results["iters"].sum()


# --- the gate on incomplete new runs, on real runs: copies of the committed baseline's launches ---------------------

BASELINE = Path(__file__).parent.parent / "results" / "baselines" / "cpu-ci"
GATE_THRESHOLD = ("--fail", "busbw:40%")  # wide enough that a launch of the baseline passes against the whole set
LARGE_ROW = "[gate] all_reduce builtin float32 sum in 64 MiB"


def _new_launch(tmp_path: Path, change=None) -> Path:
    """A copy of the baseline's first launch as the new side, changed (a suite run: launch/gate is the bench)."""
    run = tmp_path / "new" / "launch1"
    shutil.copytree(BASELINE / "launch1", run)
    if change:
        change(run)
    return run


def _fail(run_dir: Path, reason: str) -> None:
    meta = store.read_meta(run_dir)
    store.write_meta(run_dir, {**meta, "status": store.STATUS_FAILED, "reason": reason})


def _drop_large_row(run: Path) -> None:
    results = run / "gate" / "results.csv"
    lines = results.read_text().splitlines()
    results.write_text("\n".join(line for line in lines if ",67108864," not in line) + "\n")


def _gate(tmp_path: Path, new: Path, *extra: str, baseline: Path = BASELINE):
    markdown = tmp_path / "gate.md"
    result = invoke(["compare", str(baseline), str(new), *GATE_THRESHOLD, "--markdown", str(markdown), *extra])
    return result, markdown.read_text() if markdown.exists() else ""


@pytest.mark.no_process
def test_gate_fails_on_a_failed_new_run_unless_allowed(tmp_path):
    def failed(run):
        _fail(run / "gate", "rank 1: the ranks exited before this bench finished")
        _fail(run, "bench gate: rank 1: the ranks exited before this bench finished")
        _drop_large_row(run)  # it died before the last point

    new = _new_launch(tmp_path, failed)
    result, markdown = _gate(tmp_path, new)
    assert result.exit_code == 1, result.output + result.stderr
    for text in (result.output, markdown):
        flat = " ".join(text.replace("|", " ").split())  # a long table row may continue on the next line
        assert "gate: FAILED: the new side misses 1 baseline row(s): " + LARGE_ROW in text
        assert "2 new run(s) did not complete (the table says which and why)" in text
        assert f"run {new} incomplete run: status failed: bench gate: rank 1" in flat, flat
        assert f"run {new / 'gate'} incomplete run: status failed: rank 1: the ranks exited" in flat
    allowed, markdown = _gate(tmp_path, new, "--allow-missing")
    assert allowed.exit_code == 0, allowed.output + allowed.stderr
    for text in (allowed.output, markdown):  # accepted, and still listed
        assert "gate: passed with --allow-missing" in text and LARGE_ROW in text and "status failed" in text


@pytest.mark.no_process
def test_gate_fails_on_rows_the_new_run_misses_unless_allowed(tmp_path):
    new = _new_launch(tmp_path, _drop_large_row)  # a complete run that measured less than the baseline
    result, markdown = _gate(tmp_path, new)
    assert result.exit_code == 1, result.output + result.stderr
    assert f"gate: FAILED: the new side misses 1 baseline row(s): {LARGE_ROW}. --allow-missing" in result.output
    assert f"**gate: FAILED: the new side misses 1 baseline row(s): {LARGE_ROW}" in markdown
    assert "incomplete run" not in result.output
    allowed, _ = _gate(tmp_path, new, "--allow-missing")
    assert allowed.exit_code == 0, allowed.output
    assert f"accepted: the new side misses 1 baseline row(s): {LARGE_ROW}" in allowed.output


@pytest.mark.no_process
def test_gate_fails_on_a_run_killed_before_its_first_row(tmp_path):
    def killed(run):  # meta.json still says running: nobody lived to record the end
        for name in ("results.csv", "samples.csv"):
            (run / "gate" / name).unlink()
        for folder in (run, run / "gate"):
            store.write_meta(folder, {**store.read_meta(folder), "status": store.STATUS_RUNNING})

    result, _ = _gate(tmp_path, _new_launch(tmp_path, killed))
    assert result.exit_code == 1, result.output + result.stderr
    assert "2 new run(s) did not complete" in result.output and "incomplete run: status running" in result.output
    assert "the new side misses 2 baseline row(s)" in result.output


@pytest.mark.no_process
def test_a_regression_fails_the_gate_even_with_allow_missing(tmp_path):
    def slower(run):  # every sample of the small size three times as long, its busbw a third
        for name, column, factor in (("samples.csv", "time_us", 3.0), ("results.csv", "busbw_gbps", 1 / 3)):
            path = run / "gate" / name
            frame = store.read_rows(path, ["schema_version"])
            small = frame["size_bytes"] == 16777216
            frame.loc[small, column] = frame.loc[small, column] * factor
            frame.to_csv(path, index=False)
        _drop_large_row(run)

    result, _ = _gate(tmp_path, _new_launch(tmp_path, slower), "--allow-missing")
    assert result.exit_code == 1 and "1 regression(s)" in result.output, result.output + result.stderr


@pytest.mark.no_process
def test_a_failed_baseline_is_bad_input(tmp_path):
    baseline = _new_launch(tmp_path, lambda run: _fail(run / "gate", "rank 0: killed"))
    result = invoke(["compare", str(baseline), str(BASELINE / "launch2"), *GATE_THRESHOLD])
    assert_refused(result, fragment="not a complete run (status failed: rank 0: killed)")
    assert "re-record it" in result.stderr


@pytest.mark.no_process
def test_wrong_results_in_the_new_run_fail_the_gate_even_with_allow_missing(tmp_path):
    def wrong(run):  # the small size's check found 3 wrong elements: its speed proves nothing
        path = run / "gate" / "results.csv"
        frame = store.read_rows(path, ["schema_version"])
        frame.loc[frame["size_bytes"] == 16777216, "n_wrong"] = 3
        frame.to_csv(path, index=False)

    for extra in ((), ("--allow-missing",)):
        result, markdown = _gate(tmp_path, _new_launch(tmp_path / "-".join(extra or ("plain",)), wrong), *extra)
        assert result.exit_code == 1, result.output + result.stderr
        for text in (result.output, markdown):
            assert "1 new row(s) with wrong results: [gate] all_reduce builtin float32 sum in 16 MiB" in text


@pytest.mark.no_process
def test_an_unchecked_new_row_is_said_unchecked_never_passed_as_0_wrong(tmp_path):
    """A row whose n_wrong is empty (--no-check) was not verified: the gate still judges its speed and passes, but
    the table, the Markdown, the JSON and the gate's line call it unchecked; a checked copy says none of it."""
    def unchecked(run):
        path = run / "gate" / "results.csv"
        frame = store.read_rows(path, ["schema_version"])
        frame.loc[frame["size_bytes"] == 16777216, "n_wrong"] = None
        frame.to_csv(path, index=False)

    checked, _ = _gate(tmp_path / "checked", _new_launch(tmp_path / "checked"))
    assert checked.exit_code == 0 and "unchecked" not in checked.output
    assert checked.output.rstrip().endswith("# gate: passed")
    new = _new_launch(tmp_path / "unchecked", unchecked)
    result, markdown = _gate(tmp_path, new)
    assert result.exit_code == 0, result.output + result.stderr
    line = "gate: passed; 1 new row(s) unchecked (n_wrong empty): their results were not verified"
    assert result.output.rstrip().endswith(f"# {line}") and line in markdown
    assert "# unchecked: 1 row(s) of the new run were not checked" in result.output
    assert "| [gate] all_reduce builtin float32 sum in 16 MiB |  | | | | | | | | unchecked: n_wrong empty" in markdown
    document = json.loads(invoke(["compare", str(BASELINE), str(new), *GATE_THRESHOLD, "--json"]).stdout)
    found = [entry for entry in document["entries"] if entry["verdict"] == "unchecked"]
    assert [entry["row"] for entry in found] == ["[gate] all_reduce builtin float32 sum in 16 MiB"]
    assert document["gate"]["passed"] and "1 unchecked" in document["summary"]
