"""What the CLI prints for scripts and people: `--json` (one strict JSON document on stdout), `-q` (one line, the run
folder), `commbench suites`, no hidden option guessed for a misspelt one, warnings for input that runs but measures
something other than it seems, parameter counts as --params writes them, and the tables: a bare `commbench sweep`
fits a screen, --verbose prints nccl-tests' full layout.

Three real launches in one module fixture: a sweep with --json (two ranks pinned to one core, with an --op that
all_gather does not take: both warnings), the same kind of sweep with -q (nothing to warn about), and a two-bench suite
with --json. Three more (fixture `printed`): the bare sweep, a small sweep and a one-bench suite with --verbose. All but
the bare sweep (the session's shared run, a process of its own) run the CLI in this process (tests/in_process.py:
the same launches and the same printed text, read at the file descriptors, without an interpreter start and a torch
import each): these tests are about what a command prints, not about its process."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import click
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.benches.options import parse_options
from commbench.cli.json_output import emit_json
from commbench.collectives import COLLECTIVES
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.machine import Machine, resolve_target, usable_cpus
from commbench.models.alpha_beta import fit_line
from commbench.models.fit_files import LOW_R2
from commbench.shipped import shipped_suite, suite_names
from commbench.units import format_count, parse_count
from tests.conftest import commbench_env
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

WARNING = "commbench: warning:"
TINY = ("--backend", "gloo", "--device", "cpu", "--impl", "builtin", "--warmup", "1", "--iters", "6")
SUITE = """
description = "two tiny sweeps"
backend = "gloo"
device = "cpu"

[[bench]]
name = "mixed"
kind = "sweep"
collective = ["all_reduce", "all_gather"]
op = "max"
sizes = "1K"
impl = "builtin"
warmup = 1
iters = 6

[[bench]]
name = "ar"
kind = "sweep"
collective = "all_reduce"
sizes = "1K,4K"
impl = "builtin"
warmup = 1
iters = 6
"""


def _strict_json(text: str):
    """json.loads that refuses NaN and Infinity, which Python's json writes but JSON does not have."""
    def refuse(token):
        raise AssertionError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def _one_core_cache(folder: Path) -> Path:
    """A machine-facts cache for the sweep pinned to one core: the host's copy and loopback rates as the session
    measured them (tests/conftest.py), kept for 1 core. The cache keeps one core count per host: with the session's
    own cache this sweep would measure them again at 1 core (~5 s) and keep those in place of the 2-core ones, which
    the next sweep of the session (on either worker) would then measure again. Its expectations are not under test."""
    folder.mkdir()
    for kept in Path(os.environ["COMMBENCH_CACHE_DIR"]).glob("host-rates-*.json"):
        (folder / kept.name).write_text(json.dumps({**json.loads(kept.read_text()), "cores": 1}))
    return folder


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """The three runs, one after another in this process (tests/in_process.py)."""
    cwd = tmp_path_factory.mktemp("cli_output")
    (cwd / "suite.toml").write_text(SUITE)
    one_core = {min(os.sched_getaffinity(0))}  # the launcher and, inheriting it, its 2 ranks on 1 core
    commands = {
        "json": (["sweep", *TINY, "-c", "all_reduce,all_gather", "--op", "max", "--sizes", "1K,4K,16K", "--nproc",
                  "2", "--oversubscribe", "--placement", "out", "--run-id", "json", "--json"], one_core,
                 {"COMMBENCH_CACHE_DIR": str(_one_core_cache(cwd / "cache"))}),
        "quiet": (["sweep", *TINY, "-c", "all_reduce", "--sizes", "1K,4K", "--run-id", "quiet", "-q"], None, {}),
        "suite": (["run", "suite.toml", "--run-id", "suite", "--json"], None, {}),
    }
    done = {name: commbench_here(*args, "--out", "results", cwd=cwd, cpus=cpus, env=env)
            for name, (args, cpus, env) in commands.items()}
    done["cwd"] = cwd
    return done


@pytest.mark.distributed
def test_quiet_prints_the_run_folder_and_nothing_else(launched):
    quiet = launched["quiet"]
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    lines = quiet.stdout.splitlines()
    assert len(lines) == 1 and quiet.stdout == lines[0] + "\n", quiet.stdout
    run_dir = launched["cwd"] / lines[0]
    assert run_dir.is_dir() and run_dir.name == "quiet"
    assert store.read_meta(run_dir)["status"] == "complete"
    if usable_cpus() >= 2:  # 2 ranks on 2 cores, every collective reduces: nothing to warn about
        assert WARNING not in quiet.stderr, quiet.stderr


@pytest.mark.distributed
def test_sweep_json_is_one_document_with_the_rows_and_the_warnings_on_stderr(launched):
    run = launched["json"]
    assert run.returncode == 0, run.stderr[-2000:]
    document = _strict_json(run.stdout)
    run_dir = launched["cwd"] / document["run_dir"]
    assert document["command"][:2] == ["commbench", "sweep"] and "--json" in document["command"]
    assert (document["status"], document["exit_code"], document["n_wrong"]) == ("complete", 0, 0)
    rows = store.read_results(run_dir, COLLECTIVE)
    assert len(document["results"]) == len(rows) == 2 * 3  # all_reduce and all_gather at 3 sizes
    assert [row["size_bytes"] for row in document["results"]] == list(rows["size_bytes"])
    # --placement out asked of all_reduce, which torch offers in place only: a note
    assert any("in-place only" in note for note in document["notes"]) and document["teardown"] is None
    # pinned to one core with --oversubscribe, and --op max given to all_gather too: both said once, on stderr
    warned = [line for line in run.stderr.splitlines() if line.startswith(WARNING)]
    assert len(warned) == 2, run.stderr
    assert "2 ranks share this machine's 1 CPU core(s)" in warned[0] and "OS scheduler" in warned[0]
    assert "--op max applies to all_reduce only; all_gather takes no op" in warned[1]
    assert document["warnings"] == [line.removeprefix(WARNING + " ") for line in warned]
    assert "# note:" in run.stderr  # notes went to stderr, not into the document's stream


@pytest.mark.distributed
def test_run_json_has_each_bench_with_its_rows_and_the_warning_names_the_bench(launched):
    run = launched["suite"]
    assert run.returncode == 0, run.stderr[-2000:]
    document = _strict_json(run.stdout)
    assert (document["status"], document["exit_code"], document["description"]) == ("complete", 0, "two tiny sweeps")
    assert [bench["name"] for bench in document["benches"]] == ["mixed", "ar"]
    for bench, rows in zip(document["benches"], (2, 2)):
        assert bench["status"] == "complete" and bench["exit_code"] == 0 and len(bench["results"]) == rows
        assert (launched["cwd"] / bench["run_dir"] / "results.csv").exists()
    assert document["warnings"] == ["suite.toml: bench 'mixed' (sweep): --op max applies to all_reduce only; "
                                    "all_gather takes no op (its rows say op none)"]
    assert f"{WARNING} {document['warnings'][0]}" in run.stderr.splitlines()


@pytest.fixture
def fitted_copy(launched, tmp_path):
    """A copy of the JSON sweep's run folder whose times are set per collective (the fit's rules, tested on times
    whose shape is known: a real sweep's R² depends on the machine's load)."""
    source = launched["cwd"] / "results" / "json"

    def copy(times_us) -> Path:
        run_dir = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(source, run_dir)
        results = pd.read_csv(run_dir / "results.csv")
        results["time_us_p50"] = [times_us[row.collective](row.size_bytes) for row in results.itertuples()]
        results.to_csv(run_dir / "results.csv", index=False)
        return run_dir

    return copy


def _linear(size: int) -> float:
    return 50.0 + size / 1000  # α 50 µs, 1 GB/s


@pytest.mark.distributed
def test_fit_json_has_each_fit_with_residuals_and_the_files(launched, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(launched["cwd"] / "results" / "json", run_dir)
    result = invoke(["fit", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    document = _strict_json(result.stdout)
    assert [Path(path).name for path in document["written"]] == ["fit.csv", "fit_residuals.csv"]
    assert all(Path(path).exists() for path in document["written"])
    assert {fit["collective"] for fit in document["fits"]} == {"all_reduce", "all_gather"}
    for fit in document["fits"]:
        assert len(fit["residuals"]) == fit["n_points"] == 3
        # the flag is the threshold on this machine's R², whatever it came out as (null: not a number)
        assert fit["low_r2"] == (fit["r2"] is None or not fit["r2"] >= LOW_R2)


@pytest.mark.distributed
def test_fit_flags_a_low_r2_in_the_table_and_the_json(fitted_copy):
    # all_reduce: latency-bound noise that does not grow with size; all_gather: on the α–β line
    run_dir = fitted_copy({"all_reduce": lambda size: {1024: 90.0, 4096: 40.0, 16384: 80.0}[size],
                           "all_gather": _linear})
    table = invoke(["fit", str(run_dir)])
    assert table.exit_code == 0, table.output
    rows = {line.split()[0]: line for line in table.stdout.splitlines() if line.startswith("all_")}
    assert " low " in rows["all_reduce"] and " low " not in rows["all_gather"]
    assert table.stdout.count("# low: R² below 0.9, the α–β line does not describe these points") == 1
    fits = {fit["collective"]: fit for fit in _strict_json(invoke(["fit", str(run_dir), "--json"]).stdout)["fits"]}
    assert fits["all_reduce"]["low_r2"] is True and fits["all_gather"]["low_r2"] is False

    clean = invoke(["fit", str(fitted_copy({"all_reduce": _linear, "all_gather": _linear}))]).stdout
    assert " low " not in clean and "# low:" not in clean and "all_reduce" in clean


@pytest.mark.no_process
def test_the_r2_threshold_separates_jitter_from_a_line_that_misses():
    """LOW_R2's reasoning, drawn: an exact α–β curve over 8 sizes (1 KiB-16 MiB, x4) with random errors per point
    stays above the threshold at 10 % errors, a protocol switch falls below it, and so do latency-bound sizes alone."""
    rng = np.random.default_rng(17)
    sizes = np.array([1024 * 4**k for k in range(8)], float)

    def r2(times):
        return fit_line(sizes, times).r2

    jitter = [r2(_linear(sizes) * (1 + 0.10 * rng.standard_normal(len(sizes)))) for _ in range(400)]
    assert np.mean(np.array(jitter) >= LOW_R2) >= 0.95
    switch = np.where(sizes < 2**20, 50 + sizes / 1000, 5000 + sizes / 4000)  # a slower protocol from 1 MiB
    assert r2(switch) < LOW_R2
    small = sizes[:4]  # 1-64 KiB at α 500 µs: the bytes add under 15 %, 5 % noise is most of the spread
    latency_bound = [fit_line(small, (500 + small / 1000) * (1 + 0.05 * rng.standard_normal(4))).r2
                     for _ in range(400)]
    assert np.mean(np.array(latency_bound) < LOW_R2) >= 0.5


@pytest.mark.distributed
def test_model_comm_from_a_run_at_other_ranks_says_it_extrapolates(fitted_copy):
    run_dir = fitted_copy({"all_reduce": _linear, "all_gather": _linear})  # fitted at 2 ranks
    at_8 = invoke(["model", "comm", "--params", "1B", "--ranks", "8", "--from", str(run_dir)])
    assert at_8.exit_code == 0, at_8.output
    assert "# note: α and bandwidth were fitted at 2 ranks, so the times at 8 extrapolate" in at_8.stdout
    at_2 = invoke(["model", "comm", "--params", "1B", "--ranks", "2", "--from", str(run_dir)])
    assert at_2.exit_code == 0 and "extrapolate" not in at_2.stdout
    for ranks, extrapolated in (("8", True), ("2", False)):
        document = _strict_json(invoke(["model", "comm", "--params", "1B", "--ranks", ranks, "--from", str(run_dir),
                                        "--json"]).stdout)
        assert (document["fit_world_size"], document["extrapolated"]) == (2, extrapolated)


def _scattered(size: int) -> float:
    return {1024: 100.0, 4096: 400.0, 16384: 150.0}[size]  # times a line misses: R² 0.11, α and slope above 0


@pytest.mark.distributed
def test_model_comm_from_a_low_fit_is_refused_in_fits_words(fitted_copy):
    from commbench.models.fit_files import LOW_FIT_ADVICE

    run_dir = fitted_copy({"all_reduce": _scattered, "all_gather": _linear})
    fitted = invoke(["fit", str(run_dir)])
    assert fitted.exit_code == 0 and f"# low: R² below 0.9, {LOW_FIT_ADVICE}" in fitted.stdout, fitted.output
    # sizes as the rest of the tool writes them
    assert re.search(r" at \d+ KiB", fitted.stdout) and not re.search(r" at \d+ B\b", fitted.stdout), fitted.stdout
    refused = invoke(["model", "comm", "--params", "1B", "--ranks", "8", "--from", str(run_dir)])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
    assert LOW_FIT_ADVICE in refused.stderr and "--allow-poor-fit" in refused.stderr
    allowed = invoke(["model", "comm", "--params", "1B", "--ranks", "8", "--from", str(run_dir), "--allow-poor-fit"])
    assert allowed.exit_code == 0 and "R² " in allowed.stdout, allowed.output


@pytest.mark.no_process
def test_model_json_is_strict_and_headers_print_counts_as_params_takes_them():
    memory = invoke(["model", "memory", "--params", "70B", "--ranks", "8", "--json"])
    assert _strict_json(memory.stdout)["params"] == 70e9 and memory.stderr == ""
    comm = invoke(["model", "comm", "--params", "1.5B", "--ranks", "8", "--json"])
    document = _strict_json(comm.stdout)
    assert document["params"] == 1.5e9 and document["extrapolated"] is False and document["fit_world_size"] is None
    assert "# model state per rank: 70B parameters, 8 ranks" in invoke(
        ["model", "memory", "--params", "70B", "--ranks", "8"]).stdout
    assert "ring collectives: 125M parameters x 2 B, 8 ranks" in invoke(
        ["model", "comm", "--params", "125M", "--ranks", "8"]).stdout


@pytest.mark.no_process
@pytest.mark.parametrize("count, text", [
    (70e9, "70B"), (1.5e9, "1.5B"), (125e6, "125M"), (350e3, "350K"), (7e12, "7T"), (999, "999"), (1000, "1K"),
    (1_234_567, "1.234567M"), (0.5, "0.5"), (2.5e3, "2.5K"), (100e6, "100M"), (1e15, "1000T"),
    (parse_count("2.05M", option="--params"), "2.05M"),  # 2049999.9999999998 as a float
    (parse_count("1.5e9", option="--params"), "1.5B"), (671_000_000_000, "671B"), (math.inf, "inf"),
])
def test_format_count(count, text):
    assert format_count(count) == text
    if math.isfinite(count):
        assert parse_count(text, option="--params") == pytest.approx(count, rel=1e-15)  # it reads back


@pytest.mark.no_process
def test_every_json_document_is_strict_json():
    """What every --json goes through (selftest's real document is parsed in tests/test_selftest.py): NaN and
    infinities become null, numpy scalars plain numbers, paths strings, a frame its rows; json.loads with a
    parse_constant that refuses NaN/Infinity reads it back."""
    document = {"wall_s": float("nan"), "n": np.int64(3), "busbw": np.float64("inf"), "run_dir": Path("/tmp/x"),
                "rows": pd.DataFrame({"time_us_p50": [1.5, math.nan], "note": ["a", None]})}
    printed = CliRunner().invoke(click.command()(lambda: emit_json(document)), [])
    assert _strict_json(printed.stdout) == {"wall_s": None, "n": 3, "busbw": None, "run_dir": "/tmp/x",
                                            "rows": [{"time_us_p50": 1.5, "note": "a"},
                                                     {"time_us_p50": None, "note": None}]}


@pytest.mark.no_process
def test_suites_lists_each_shipped_suite_with_its_description():
    result = invoke(["suites"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == suite_names() and len(lines) >= 6
    listed = {entry["name"]: entry for entry in _strict_json(invoke(["suites", "--json"]).stdout)["suites"]}
    for line, name in zip(lines, suite_names()):
        text = shipped_suite(name).read_text()
        description = listed[name]["description"]
        assert description and f'description = "{description}"' in text  # from the file, not written twice
        assert line.split(None, 1)[1] == description


@pytest.mark.no_process
def test_suites_show_prints_the_toml_and_refuses_an_unknown_name(tmp_path):
    shown = invoke(["suites", "show", "cpu-ci"])
    assert shown.exit_code == 0 and shown.stdout == shipped_suite("cpu-ci").read_text()
    document = _strict_json(invoke(["suites", "show", "cpu-ci", "--json"]).stdout)
    assert document["text"] == shown.stdout and document["name"] == "cpu-ci"
    line = assert_refused(invoke(["suites", "show", "cpu-cl"]), fragment="no shipped suite 'cpu-cl'")
    assert all(name in line for name in suite_names())


def test_a_misspelt_option_is_never_guessed_as_a_hidden_one():
    line = assert_refused(invoke(["run", "cpu-ci", "--int", "x"]), fragment="No such option '--int'")
    assert "--into" not in line
    assert "--into" not in invoke(["run", "--help"]).stdout
    # visible options are still guessed
    assert "--out" in assert_refused(invoke(["run", "cpu-ci", "--outt", "x"]))
    # nor does shell completion offer it
    completed = subprocess.run([sys.executable, "-m", "commbench"], capture_output=True, text=True, timeout=60,
                               env=commbench_env(_COMMBENCH_COMPLETE="bash_complete",
                                                 COMP_WORDS="commbench run cpu-ci --", COMP_CWORD="3"))
    offered = [line.split(",", 1)[1] for line in completed.stdout.splitlines()]
    assert "--out" in offered and "--into" not in offered


def _warned(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(warning.message) for warning in caught if issubclass(warning.category, CommbenchWarning)]


@pytest.mark.no_process
def test_ranks_beyond_the_cores_are_refused_or_warned_about():
    two_cores = Machine(gpus=0, nccl_available=False, cpus=2)
    with pytest.raises(CommbenchError, match="--nproc 3 exceeds this machine's 2 CPU core"):
        resolve_target(two_cores, nproc=3)
    warned = _warned(lambda: resolve_target(two_cores, nproc=3, oversubscribe=True))
    assert len(warned) == 1 and "3 ranks share this machine's 2 CPU core(s)" in warned[0]
    assert _warned(lambda: resolve_target(two_cores, nproc=2, oversubscribe=True)) == []
    # the default 2 CPU ranks run on a 1-core machine, and say so
    one_core = Machine(gpus=0, nccl_available=False, cpus=1)
    assert "2 ranks share this machine's 1 CPU core(s)" in _warned(lambda: resolve_target(one_core))[0]


@pytest.mark.no_process
def test_an_op_for_collectives_that_take_none_is_warned_about_or_refused(tmp_path):
    machine = Machine(gpus=0, nccl_available=False, cpus=2, host_memory_bytes=2**40)  # memory known: no plan warning

    def resolve(**raw):
        return lambda: COLLECTIVE.resolve(parse_options(COLLECTIVE.options, {"backend": "gloo", **raw}), machine)

    assert _warned(resolve(collectives=("all_reduce,reduce_scatter",), ops=("max",))) == []
    assert _warned(resolve(collectives=("all_gather",))) == []  # no --op given
    warned = _warned(resolve(collectives=("all_reduce,broadcast,all_to_all",), ops=("max",)))
    assert warned == ["--op max applies to all_reduce only; broadcast, all_to_all take no op (their rows say op none)"]
    reducing = ", ".join(name for name, collective in COLLECTIVES.items() if collective.reduces)
    assert_refused(invoke(["sweep", "-c", "all_gather", "--op", "max", "--out", str(tmp_path)]),
                   fragment=f"--op max applies to reducing collectives only ({reducing})", left_empty=[tmp_path])


@pytest.mark.no_process
def test_a_refusal_after_a_warning_is_still_one_line(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text('backend = "gloo"\n[[bench]]\nkind = "sweep"\ncollective = ["all_reduce", "all_gather"]\n'
                     'op = "max"\n[[bench]]\nname = "bad"\nkind = "sweep"\nsizes = "1K:oops:x2"\n')
    assert_refused(invoke(["run", str(suite), "--out", str(tmp_path / "results")]), fragment="bad size 'oops'",
                   left_empty=[tmp_path / "results"])


ONE_BENCH = """
description = "one tiny sweep"
backend = "gloo"
device = "cpu"

[[bench]]
name = "tiny"
kind = "sweep"
collective = ["all_reduce", "all_gather"]
sizes = "1K,4K"
impl = "builtin"
warmup = 1
iters = 6
"""
SCREEN_LINES = 60
TITLE = re.compile(r"^# (\w+) \((\w+), (out-of-place|in-place|out-of-place and in-place)\) on \S+, \d+ ranks; "
                   r"batch timing: median of 20 samples of [\d–]+ back-to-back calls, mean over ranks")
NOISE_SUMMARY = "# ±CI (%) = half-width of the median time's 95 % CI; "


@pytest.fixture(scope="module")
def printed(tmp_path_factory, bare_sweep):
    """What a person reads: the bare `commbench sweep` (the default suite, the session's shared run), and a small
    sweep and a one-bench suite with --verbose (in this process, tests/in_process.py)."""
    cwd = tmp_path_factory.mktemp("printed")
    (cwd / "suite.toml").write_text(ONE_BENCH)
    tiny = ("--backend", "gloo", "--device", "cpu", "-c", "all_reduce,all_gather", "--sizes", "1K,4K", "--impl",
            "builtin", "--warmup", "1", "--iters", "6")
    commands = {"verbose": ["sweep", *tiny, "--verbose"], "run": ["run", "suite.toml", "--verbose"]}
    done = {name: commbench_here(*args, "--out", "results", "--run-id", name, cwd=cwd)
            for name, args in commands.items()}
    return {**done, "bare": bare_sweep}


@pytest.mark.distributed
def test_the_bare_sweep_fits_a_screen_with_a_table_per_collective(printed):
    run = printed["bare"]
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines() + run.stderr.splitlines()  # the progress bar included
    assert len(lines) <= SCREEN_LINES, "\n".join(lines)
    results = store.read_results(run.run_dir / "collectives", COLLECTIVE)
    assert set(results["impl"]) == {"builtin"}
    out = run.stdout.splitlines()
    titles = [(index, TITLE.match(line)) for index, line in enumerate(out) if TITLE.match(line)]
    assert [match.group(1) for _, match in titles] == ["all_reduce", "reduce_scatter", "all_gather"]
    for index, match in titles:
        collective, placements = match.group(1), match.group(3).split(" and ")
        rows = results[results["collective"] == collective]
        measured = ["in-place" if inplace else "out-of-place" for inplace in sorted(set(rows["inplace"]))]
        assert placements == measured  # the title names the placements measured, and only those have columns
        head = out[index + 1]
        for title in ("size (B)", "time (us)", "±CI (%)", "algbw (GB/s)", "busbw (GB/s)"):
            assert head.count(title) == len(placements), head
        data = out[index + 2:index + 2 + len(rows)]
        assert [int(line.split()[0]) for line in data] == list(rows["size_bytes"])
        # no empty group (only % of expected is "-", at sizes where latency dominates); no wrong result
        assert all("-" not in line.split()[:9] + line.split()[10:] and "<--" not in line for line in data)
        assert all(" ".join(line.split()[11:]) in ("", "noisy", "no CI") for line in data)  # flagged in a word
        avg = out[index + 2 + len(rows)]
        assert avg.startswith("# Avg bus bandwidth: ")
        assert float(avg.split()[4]) == pytest.approx(rows["busbw_gbps"].mean(), abs=5e-4)
        assert "mean busbw ≥ 1 MiB: " in avg
    # the noise said once, under the last table: how many points, and what to do
    summary = [line for line in out if line.startswith(NOISE_SUMMARY)]
    assert summary == [out[-2]] and out[-1].startswith("# Results: ")
    noisy = sum(1 for line in out if line.endswith(("noisy", "no CI")))  # one placement per row here
    assert (f"{noisy} of 45 points" in summary[0] and "--target-ci 10 --max-time S" in summary[0]
            and "--iters" in summary[0] and "run set" in summary[0]) if noisy else "all 45 points" in summary[0]
    assert not any(line.startswith("## ") for line in out)  # one bench: no heading
    assert "ring vs builtin" not in run.stdout and "# noisy =" not in run.stdout


@pytest.mark.distributed
def test_verbose_prints_the_full_tables_on_a_sweep_and_a_suite(printed):
    for name in ("verbose", "run"):
        run = printed[name]
        assert run.returncode == 0, run.stderr[-2000:]
        out = run.stdout.splitlines()
        titles = [index for index, line in enumerate(out) if line.startswith(("# all_reduce (", "# all_gather ("))]
        assert len(titles) == 2, run.stdout
        for index in titles:
            # nccl-tests' layout: both placement groups, names and units on lines of their own
            assert out[index + 1].split() == ["#", "out-of-place", "in-place"]
            assert out[index + 2].count("time p50") == 2 and out[index + 3].count("(GB/s)") == 4
            # each size has one placement measured: the other's group is "-"
            assert all(line.split().count("-") == 5 for line in out[index + 4:index + 6])
        assert run.stdout.count("# ±CI = half-width of the median time's 95 % CI") == 2  # a legend per table
        assert run.stdout.count("# noisy = above ±10 %") == 2
        assert NOISE_SUMMARY not in run.stdout and run.stdout.count("# Avg bus bandwidth: ") == 2
    assert not any(line.startswith("## ") for line in printed["run"].stdout.splitlines())  # a one-bench suite


@pytest.mark.no_process
def test_the_default_suite_runs_the_builtins_and_the_ring_suite_sets_the_ring_beside_them():
    machine = Machine(gpus=0, nccl_available=False, cpus=2)
    from commbench.suite.load import load_suite

    [default] = load_suite("default", machine).benches
    [ring] = load_suite("ring", machine).benches
    assert default.bench.spec.impls == ("builtin",) and ring.bench.spec.impls == ("builtin", "ring")
    for spec in (default.bench.spec, ring.bench.spec):
        assert spec.collectives == ("all_reduce", "reduce_scatter", "all_gather")
    assert ring.bench.spec.sizes == default.bench.spec.sizes
    assert "builtin" in shipped_suite("default").read_text().split("description = ")[1].splitlines()[0]
    assert "ring" in suite_names() and "ring" in invoke(["suites"]).stdout
