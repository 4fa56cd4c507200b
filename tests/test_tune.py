"""`commbench tune`: per size, the fastest environment combination and whether it wins beyond noise; the α–β fit of
each combination (`commbench fit` fits per (collective, env)) and their crossovers; and the CSV NVIDIA's example tuner
plugin reads. (tests/test_tune_plugin.py has the plugin itself read the CSV.)

Two kinds of input. Real nccl-tests logs of one RTX 5090 under different NCCL_ALGO / NCCL_PROTO settings
(tests/data/imports/nccl-tests-algo/README.md gives their source), imported with their --env, for what tune decides
on real figures. And run folders written here with the project's own writers (store.RowWriter, store.write_meta)
holding rows this file MAKES UP to exercise one rule each, e.g. two settings at 10 µs and 20 µs: those rows are not
measurements and no figure from them is claimed as one."""

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from commbench import store
from commbench.imports.write import COLUMNS
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

ALGO = Path(__file__).parent / "data" / "imports" / "nccl-tests-algo"
PREFIX = "rtx5090_2rank_1gpu_socket_"
REAL_LOGS = [  # run id, file, the --env it was taken under (as the source's command line sets it on both ranks)
    ("ar-default", f"{PREFIX}all_reduce_default.txt", []),
    ("ar-simple", f"{PREFIX}all_reduce_NCCL_PROTO-Simple.txt", ["NCCL_PROTO=Simple"]),
    ("ar-tree-simple", f"{PREFIX}all_reduce_NCCL_ALGO-Tree_NCCL_PROTO-Simple.txt",
     ["NCCL_ALGO=Tree", "NCCL_PROTO=Simple"]),
    ("bc-default", f"{PREFIX}broadcast_default.txt", []),
    ("bc-simple", f"{PREFIX}broadcast_NCCL_PROTO-Simple.txt", ["NCCL_PROTO=Simple"]),
    ("bc-ll", f"{PREFIX}broadcast_NCCL_PROTO-LL.txt", ["NCCL_PROTO=LL"]),
]
MAX_BYTES = 2**64 - 1
KIB, MIB = 1024, 1024 * 1024


# ---------------------------------------------------------------------------------------------------- helpers


def tune(*args) -> tuple[object, dict | None]:
    """`commbench tune ARGS --json`: the result and its document (None where it refused)."""
    result = invoke(["tune", *map(str, args), "--json"])
    return result, (json.loads(result.stdout) if result.exit_code == 0 else None)


def synthetic_run(root: Path, name: str, points: list[dict], *, hosts=("node0",), world: int = 2,
                  backend: str = "nccl") -> Path:
    """A run folder written with the project's own writers, holding rows THIS TEST MAKES UP (not measurements) to
    exercise one of tune's rules. Each point: env, size, time (µs), and optionally ci (lo, hi), collective, inplace,
    dtype, note, n_wrong, timing."""
    run_dir = store.create_run_dir(root, name)
    writer = store.RowWriter(run_dir / store.RESULTS_FILE, COLUMNS)
    rows = []
    for point in points:
        low, high = point.get("ci") or ("", "")
        values = {"schema_version": store.SCHEMA_VERSION, "run_id": name, "bench": "collective",
                  "collective": point.get("collective", "all_reduce"), "impl": point.get("impl", "builtin"),
                  "backend": backend, "device": "cuda", "world_size": world, "dtype": point.get("dtype", "float32"),
                  "op": point.get("op", "sum"), "inplace": point.get("inplace", False), "size_bytes": point["size"],
                  "timing": point.get("timing", "batch"), "count": point["size"] // 4, "iters": 20, "warmup": 5,
                  "time_us_p50": point["time"], "time_us_ci_lo": low, "time_us_ci_hi": high,
                  "n_wrong": point.get("n_wrong", 0), "note": point.get("note", ""), "source": "commbench",
                  "env": point["env"]}
        rows.append({column: values.get(column, "") for column in COLUMNS})
    writer.write(rows)
    writer.close()
    store.write_meta(run_dir, {"schema_version": store.SCHEMA_VERSION, "kind": "collective", "run_id": name,
                               "status": store.STATUS_COMPLETE, "reason": None, "hosts": list(hosts),
                               "world_size": world})
    return run_dir


def sizes_from(low: int, high: int) -> list[int]:
    """low, 2·low, … high."""
    return [low * 2**step for step in range(int(math.log2(high // low)) + 1)]


def lines_of(config: Path) -> list[str]:
    return [line for line in config.read_text().splitlines() if line and not line.startswith("#")]


def decision(document: dict, size: int, **key) -> dict:
    """The decision at one size of the one group matching key (e.g. collective="all_reduce")."""
    [group] = [group for group in document["groups"] if all(group[name] == value for name, value in key.items())]
    [found] = [entry for entry in group["decisions"] if entry["size_bytes"] == size]
    return found


# ------------------------------------------------------------------------------------------- the real logs


def import_real_logs(out: Path) -> list[Path]:
    """The six real logs, each imported with the --env it was taken under, into run folders under out."""
    runs = []
    for run_id, name, env in REAL_LOGS:
        options = [item for value in env for item in ("--env", value)]
        result = invoke(["import", "nccl-tests", str(ALGO / name), *options, "--out", str(out), "--run-id", run_id,
                         "-q"])
        assert result.exit_code == 0, result.output + result.stderr
        runs.append(out / run_id)
    return runs


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> list[Path]:
    return import_real_logs(tmp_path_factory.mktemp("real") / "results")


def times_in_logs() -> dict[tuple[str, bool, int], dict[str, float]]:
    """(collective, in place, size) → {env label: time (µs)}, read from the log files here, apart from the importer:
    each data row is `size count type redop root time algbw busbw #wrong time algbw busbw #wrong`."""
    found: dict[tuple[str, bool, int], dict[str, float]] = {}
    for _, name, env in REAL_LOGS:
        collective = "all_reduce" if "all_reduce" in name else "broadcast"
        label = " ".join(sorted(env))
        for line in (ALGO / name).read_text().splitlines():
            fields = line.split()
            if line.startswith("#") or len(fields) != 13:
                continue
            size = int(fields[0])
            found.setdefault((collective, False, size), {})[label] = float(fields[5])
            found.setdefault((collective, True, size), {})[label] = float(fields[9])
    return found


def test_tune_picks_the_faster_setting_of_real_logs_wherever_they_differ_beyond_5_pct(real_runs, tmp_path):
    config = tmp_path / "nccl_tuner.conf"
    result, document = tune(*real_runs, "--out", config)
    assert result.exit_code == 0, result.output + result.stderr
    times, seen = times_in_logs(), 0
    print("\nreal logs, one RTX 5090 (2 ranks): size, placement, best setting, margin, beyond 5 %, line")
    for group in document["groups"]:
        for entry in group["decisions"]:
            measured = sorted(times[(group["collective"], group["inplace"], entry["size_bytes"])].items(),
                              key=lambda item: item[1])
            (best, best_time), (_, second_time) = measured[0], measured[1]
            margin = (second_time / best_time - 1) * 100
            assert entry["best_env"] == best and entry["rule"] == "margin"  # imports have no CIs
            assert entry["margin_pct"] == pytest.approx(margin)
            assert entry["beyond_noise"] == (margin > 5)
            if not entry["beyond_noise"] or best == "":  # a tie, or NCCL's own choice fastest: never a line
                assert entry["choice"] is None and entry["line"] is None
            if entry["beyond_noise"] and best:  # broadcast's protocol won: ring (its only algorithm) with it
                assert entry["choice"] == {"algorithm": "ring",
                                           "protocol": best.split("=")[1].lower()}, entry
            seen += 1
            print(f"  {group['collective']:<10} {entry['size_bytes']:>9} B {'in ' if group['inplace'] else 'out'} "
                  f"{best or '(default)':<32} {margin:7.1f} % {'yes' if entry['beyond_noise'] else 'no ':>3} "
                  f"{entry['line'] or '-'}")
    assert seen == 2 * 25 + 2 * 18  # both placements of every size of both comparison sets
    # all_reduce: the three settings never differ by 5 % (the largest margin is 1.6 %): NCCL decides everywhere
    assert not any(entry["beyond_noise"] for group in document["groups"] if group["collective"] == "all_reduce"
                   for entry in group["decisions"])
    # broadcast: NCCL_PROTO=Simple wins by more than 5 % in place and out of place at 16 KiB and 2 MiB only; the
    # other sizes tie, let NCCL's own choice win, or have the placements disagree
    assert lines_of(config) == ["broadcast,11586,23170,ring,simple,-1,1,2",
                                "broadcast,1482911,2965820,ring,simple,-1,1,2"]
    assert [line["text"] for line in document["lines"]] == lines_of(config)
    assert all("NCCL_ALGO was not an axis: ring is written" in line["notes"][0] for line in document["lines"])


def test_the_real_logs_print_a_table_with_units_and_the_fits(real_runs):
    result = invoke(["tune", *map(str, real_runs)])
    assert result.exit_code == 0, result.output + result.stderr
    out = result.stdout
    for header in ("sizes", "best time (us)", "margin (%)", "beyond noise", "choice"):
        assert header in out
    assert "α–β fit NCCL_PROTO=LL: α" in out and "GB/s" in out
    assert "fitted crossover at" in out  # the fits of the broadcast settings cross inside the measured sizes
    assert "broadcast,11586,23170,ring,simple,-1,1,2" in out
    assert "# not written: pass --out FILE" in out


# ---------------------------------------------------------------------------- rules, on made-up rows (not measured)


def test_a_setting_beyond_the_cis_gets_a_line_and_overlapping_cis_tie(tmp_path):
    # made up: at 1 KiB tree's CI (9.8-10.2 µs) lies below ring's (19-21): a decision; at 2 KiB they overlap: a tie
    run = synthetic_run(tmp_path, "ci", [
        {"env": "NCCL_ALGO=tree NCCL_PROTO=ll", "size": KIB, "time": 10.0, "ci": (9.8, 10.2)},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=ll", "size": KIB, "time": 20.0, "ci": (19.0, 21.0)},
        {"env": "NCCL_ALGO=tree NCCL_PROTO=ll", "size": 2 * KIB, "time": 10.0, "ci": (9.0, 12.0)},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=ll", "size": 2 * KIB, "time": 11.0, "ci": (10.5, 11.5)},
    ])
    config = tmp_path / "tuner.conf"
    result, document = tune(run, "--out", config)
    assert result.exit_code == 0, result.output + result.stderr
    decided, tied = decision(document, KIB), decision(document, 2 * KIB)
    assert decided["rule"] == "ci" and decided["beyond_noise"] and decided["margin_pct"] == pytest.approx(100.0)
    assert decided["candidates"][0] == {"env": "NCCL_ALGO=tree NCCL_PROTO=ll", "run": str(run), "time_us_p50": 10.0,
                                        "time_us_ci_lo": 9.8, "time_us_ci_hi": 10.2}
    assert tied["rule"] == "ci" and not tied["beyond_noise"] and tied["outcome"] == "tie"
    assert "no setting wins beyond noise" in tied["why_no_line"]
    # 1 KiB's range ends where 2 KiB's begins: the geometric midpoint, √(1024·2048) = 1448.2 → 1448 is the last byte
    assert lines_of(config) == ["allreduce,0,1448,tree,ll,-1,1,2"]


def test_without_cis_the_margin_decides_and_margin_pct_moves_the_bar(tmp_path):
    # made up: 10 µs against 10.4 µs, no CIs (as an import has): 4 % apart
    run = synthetic_run(tmp_path, "margin", [
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 10.4},
    ])
    _, strict = tune(run)
    assert decision(strict, KIB)["rule"] == "margin" and not decision(strict, KIB)["beyond_noise"]
    assert strict["lines"] == [] and not strict["beyond_noise_anywhere"]
    _, loose = tune(run, "--margin-pct", "3")
    assert decision(loose, KIB)["beyond_noise"]
    assert [line["text"] for line in loose["lines"]] == [f"allreduce,0,{MAX_BYTES},tree,simple,-1,1,2"]


def test_when_nccls_own_choice_wins_there_is_no_line(tmp_path):
    run = synthetic_run(tmp_path, "default", [  # made up: the default environment 10 µs, forced ring 20 µs
        {"env": "", "size": KIB, "time": 10.0, "ci": (9.9, 10.1)},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0, "ci": (19.9, 20.1)},
    ])
    result, document = tune(run, "--out", tmp_path / "tuner.conf")
    entry = decision(document, KIB)
    assert entry["beyond_noise"] and entry["best_env"] == "" and entry["choice"] is None
    assert "NCCL's own choice (the default environment) is fastest" in entry["why_no_line"]
    assert lines_of(tmp_path / "tuner.conf") == []
    assert "no line at all: NCCL decides everywhere" in (tmp_path / "tuner.conf").read_text()


def test_protocol_not_an_axis_writes_simple_and_says_why(tmp_path):
    run = synthetic_run(tmp_path, "algo-only", [  # made up: only NCCL_ALGO varied
        {"env": "NCCL_ALGO=tree", "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=ring", "size": KIB, "time": 20.0},
    ])
    _, document = tune(run)
    [line] = document["lines"]
    assert line["text"] == f"allreduce,0,{MAX_BYTES},tree,simple,-1,1,2"
    assert any(note.startswith("NCCL_PROTO was not an axis") and "simple is written" in note
               for note in decision(document, KIB)["notes"])
    assert line["notes"] == decision(document, KIB)["notes"]


def test_algorithm_not_an_axis_is_ring_for_broadcast_and_reduce_and_no_line_for_the_others(tmp_path):
    points = [{"collective": collective, "env": env, "size": KIB, "time": time}  # made up: only NCCL_PROTO varied
              for collective in ("broadcast", "reduce", "all_gather")
              for env, time in (("NCCL_PROTO=ll", 10.0), ("NCCL_PROTO=simple", 20.0))]
    _, document = tune(synthetic_run(tmp_path, "proto-only", points))
    assert [line["text"] for line in document["lines"]] == [f"broadcast,0,{MAX_BYTES},ring,ll,-1,1,2",
                                                            f"reduce,0,{MAX_BYTES},ring,ll,-1,1,2"]
    gathered = decision(document, KIB, collective="all_gather")
    assert gathered["beyond_noise"] and gathered["choice"] is None
    assert "NCCL_ALGO was not set in the winning run" in gathered["why_no_line"]


@pytest.mark.parametrize("collective", ["all_to_all", "sendrecv"])
def test_a_collective_the_plugin_does_not_know_gets_no_line(tmp_path, collective):
    run = synthetic_run(tmp_path, "unknown", [  # made up
        {"collective": collective, "env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 10.0},
        {"collective": collective, "env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 20.0},
    ])
    _, document = tune(run)
    assert document["lines"] == []
    [left] = document["no_line"]
    assert left["collective"] == collective and "would read" in left["why"] and "as allreduce" in left["why"]


@pytest.mark.parametrize("winner, why", [
    ("NCCL_ALGO=ring,tree NCCL_PROTO=simple", "allows several choices"),
    ("NCCL_ALGO=^nvls NCCL_PROTO=simple", "allows several choices"),
    ("NCCL_ALGO=hypercube NCCL_PROTO=simple", "is not a value the plugin knows"),
    ("NCCL_ALGO=ring NCCL_PROTO=simple OMP_NUM_THREADS=2", "also sets OMP_NUM_THREADS"),
    ("NCCL_ALGO=ring NCCL_NTHREADS=256", "also sets NCCL_NTHREADS"),
])
def test_a_winner_the_plugin_cannot_express_gets_no_line(tmp_path, winner, why):
    run = synthetic_run(tmp_path, "inexpressible", [  # made up
        {"env": winner, "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=tree NCCL_PROTO=ll", "size": KIB, "time": 20.0},
    ])
    _, document = tune(run)
    assert document["lines"] == [] and why in decision(document, KIB)["why_no_line"]


@pytest.mark.parametrize("spelling, algorithm, protocol", [
    ("NCCL_ALGO=NVLSTree NCCL_PROTO=LL128", "nvls_tree", "ll128"),
    ("NCCL_ALGO=CollnetDirect NCCL_PROTO=Simple", "collnet_direct", "simple"),
    ("NCCL_ALGO=collnet_chain NCCL_PROTO=LL", "collnet_chain", "ll"),
    ("NCCL_ALGO=PAT NCCL_PROTO=simple", "pat", "simple"),
    ("NCCL_ALGO=NVLS NCCL_PROTO=simple", "nvls", "simple"),
])
def test_nccl_spellings_become_the_plugins_names(tmp_path, spelling, algorithm, protocol):
    run = synthetic_run(tmp_path, "names", [  # made up
        {"env": spelling, "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=Ring NCCL_PROTO=Simple", "size": KIB, "time": 20.0},
    ])
    _, document = tune(run)
    assert [line["text"] for line in document["lines"]] == [
        f"allreduce,0,{MAX_BYTES},{algorithm},{protocol},-1,1,2"]


def test_ranges_merge_equal_neighbours_end_at_geometric_midpoints_and_never_overlap(tmp_path):
    # made up: tree wins at 1-4 KiB, a tie at 8 KiB, ring wins from 16 KiB to 1 MiB
    sizes = sizes_from(KIB, MIB)
    points = []
    for size in sizes:
        tree, ring = (10.0, 20.0) if size <= 4 * KIB else (10.0, 10.1) if size == 8 * KIB else (20.0, 10.0)
        points += [{"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": size, "time": tree},
                   {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": size, "time": ring}]
    _, document = tune(synthetic_run(tmp_path, "ranges", points))
    lines = document["lines"]
    assert [(line["min_bytes"], line["max_bytes"], line["algorithm"]) for line in lines] == [
        (0, math.isqrt(4 * KIB * 8 * KIB), "tree"),  # √(4096·8192) = 5792.6: 5792 is tree's last byte
        (math.isqrt(8 * KIB * 16 * KIB) + 1, MAX_BYTES, "ring")]  # √(8192·16384) = 11585.2: ring from 11586
    assert lines[0]["measured_sizes"] == [KIB, 2 * KIB, 4 * KIB] and lines[1]["measured_sizes"] == sizes[4:]
    for line in lines:
        assert all(line["min_bytes"] <= size <= line["max_bytes"] for size in line["measured_sizes"])
    assert lines[0]["max_bytes"] < 8 * KIB < lines[1]["min_bytes"]  # the tied size is left to NCCL
    assert [entry["size_bytes"] for entry in document["no_line"]] == [8 * KIB]


def test_variants_that_disagree_at_a_size_get_no_line(tmp_path):
    # made up: out of place tree wins, in place ring wins; the plugin cannot tell the placements apart
    run = synthetic_run(tmp_path, "placements", [
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0, "inplace": False},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0, "inplace": False},
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 20.0, "inplace": True},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 10.0, "inplace": True},
    ])
    _, document = tune(run)
    assert document["lines"] == []
    [left] = document["no_line"]
    assert left["why"].startswith("the variants disagree (out-of-place: tree/simple; in-place: ring/simple)")


def test_topologies_get_lines_of_their_own_and_any_topology_writes_minus_one(tmp_path):
    def made_up(name, world, hosts):
        return synthetic_run(tmp_path, name, [
            {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0},
            {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0}], world=world, hosts=hosts)

    one, two = made_up("one-node", 8, ["a"]), made_up("two-nodes", 16, ["a", "b"])
    _, document = tune(one, two)
    assert [line["text"] for line in document["lines"]] == [f"allreduce,0,{MAX_BYTES},tree,simple,-1,1,8",
                                                            f"allreduce,0,{MAX_BYTES},tree,simple,-1,2,16"]
    _, anywhere = tune(one, two, "--any-topology")
    assert [line["text"] for line in anywhere["lines"]] == [f"allreduce,0,{MAX_BYTES},tree,simple,-1,-1,-1"]


def test_refused_and_wrong_rows_are_left_out_and_said(tmp_path):
    run = synthetic_run(tmp_path, "refused", [  # made up
        {"env": "NCCL_ALGO=nvls NCCL_PROTO=simple", "size": KIB, "time": math.nan,
         "note": "not available: NVLS needs NVSwitch"},
        {"env": "NCCL_ALGO=pat NCCL_PROTO=simple", "size": KIB, "time": 1.0, "n_wrong": 3},
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0},
    ])
    _, document = tune(run)
    entry = decision(document, KIB)
    assert [candidate["env"] for candidate in entry["candidates"]] == ["NCCL_ALGO=tree NCCL_PROTO=simple",
                                                                       "NCCL_ALGO=ring NCCL_PROTO=simple"]
    assert {skipped["env"]: skipped["why"] for skipped in entry["skipped"]} == {
        "NCCL_ALGO=nvls NCCL_PROTO=simple": "not available: NVLS needs NVSwitch",
        "NCCL_ALGO=pat NCCL_PROTO=simple": "wrong results (3 wrong element(s)): its time is not valid"}
    assert entry["choice"] == {"algorithm": "tree", "protocol": "simple"}
    printed = invoke(["tune", str(run)]).stdout
    assert "#   left out: NCCL_ALGO=nvls NCCL_PROTO=simple at 1 KiB: not available: NVLS needs NVSwitch" in printed


def test_nccl_axes_on_gloo_rows_tie_and_the_output_says_nothing_is_beyond_noise(tmp_path):
    # made up: on gloo NCCL_ALGO changes nothing, so the two settings' CIs overlap at every size
    points = [{"env": env, "size": size, "time": 100.0, "ci": (95.0, 105.0)}
              for size in (KIB, 2 * KIB) for env in ("NCCL_ALGO=ring", "NCCL_ALGO=tree")]
    result = invoke(["tune", str(synthetic_run(tmp_path, "gloo", points, backend="gloo"))])
    assert result.exit_code == 0, result.output + result.stderr
    assert "# nothing is beyond noise" in result.stdout and "# tuner lines: none" in result.stdout


def test_gloo_rows_never_make_a_line_even_beyond_noise(tmp_path):
    run = synthetic_run(tmp_path, "gloo-apart", [  # made up
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0, "ci": (9.9, 10.1)},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0, "ci": (19.9, 20.1)}],
        backend="gloo")
    _, document = tune(run)
    assert document["lines"] == [] and "measured on gloo" in decision(document, KIB)["why_no_line"]


def test_comments_stay_under_200_bytes_on_one_line(tmp_path):
    """The plugin reads 256-byte lines: a longer comment's rest would be read as a line of its own."""
    deep = tmp_path / ("a-very-long-folder-name-" * 6) / "x\nnewline"  # a newline in a path stays inside the comment
    run = synthetic_run(deep, "long", [  # made up
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0}])
    config = tmp_path / "tuner.conf"
    result = invoke(["tune", str(run), "--out", str(config)])
    assert result.exit_code == 0, result.output + result.stderr
    text = config.read_bytes().split(b"\n")
    assert all(len(line) < 200 for line in text)
    assert all(line.startswith(b"#") for line in text if line and not line.startswith(b"allreduce,"))
    assert lines_of(config) == [f"allreduce,0,{MAX_BYTES},tree,simple,-1,1,2"]
    assert "# command: commbench tune" in config.read_text() and "# run " in config.read_text()


# ------------------------------------------------------------------------------------- fits per (collective, env)


def alpha_beta_points(env: str, alpha_us: float, us_per_byte: float) -> list[dict]:
    """Made-up times on an exact α–β line, t = α + β·S, over 1 KiB … 1 MiB."""
    return [{"env": env, "size": size, "time": alpha_us + us_per_byte * size} for size in sizes_from(KIB, MIB)]


def test_fit_fits_each_env_apart_and_tune_finds_where_the_lines_cross(tmp_path):
    # made up: A t = 10 + 1e-3·S, B t = 100 + 0.5e-3·S: they cross at S* = (100 − 10) / (1e-3 − 0.5e-3) = 180000 B
    run = synthetic_run(tmp_path, "lines", alpha_beta_points("NCCL_ALGO=tree", 10.0, 1e-3)
                        + alpha_beta_points("NCCL_ALGO=ring", 100.0, 0.5e-3))
    fitted = invoke(["fit", str(run), "--json"])
    assert fitted.exit_code == 0, fitted.output + fitted.stderr
    fits = {fit["env"]: fit for fit in json.loads(fitted.stdout)["fits"]}
    assert set(fits) == {"NCCL_ALGO=tree", "NCCL_ALGO=ring"}
    assert fits["NCCL_ALGO=tree"]["alpha_us"] == pytest.approx(10.0) and fits["NCCL_ALGO=ring"]["alpha_us"] == (
        pytest.approx(100.0))
    assert fits["NCCL_ALGO=tree"]["algbw_gbps"] == pytest.approx(1.0)  # 1e-3 µs per byte = 1 GB/s
    assert "env" in pd.read_csv(run / "fit.csv").columns
    assert set(pd.read_csv(run / "fit.csv")["env"]) == {"NCCL_ALGO=tree", "NCCL_ALGO=ring"}
    _, document = tune(run)
    [crossing] = document["groups"][0]["crossovers"]
    assert crossing["size_bytes"] == pytest.approx(180000.0)
    assert crossing["faster_below"] == "NCCL_ALGO=tree" and crossing["faster_above"] == "NCCL_ALGO=ring"
    assert crossing["inside_measured_sizes"]
    # the per-size decisions agree with the fitted crossover: tree up to 128 KiB, ring from 256 KiB
    assert [line["algorithm"] for line in document["lines"]] == ["tree", "ring"]
    assert document["lines"][0]["measured_sizes"][-1] == 128 * KIB


def test_a_run_written_before_the_env_column_fits_as_the_default_environment(tmp_path):
    run = synthetic_run(tmp_path, "old", alpha_beta_points("", 10.0, 1e-3))
    rows = pd.read_csv(run / "results.csv").drop(columns=["env"])  # the file as runs before the column wrote it
    rows.to_csv(run / "results.csv", index=False)
    fitted = invoke(["fit", str(run), "--json"])
    assert fitted.exit_code == 0, fitted.output + fitted.stderr
    assert [fit["env"] for fit in json.loads(fitted.stdout)["fits"]] == [""]
    result, _ = tune(run)  # one environment only: nothing to compare
    assert_refused(result, fragment="one environment only (the default environment)")


# ------------------------------------------------------------------------------------------------- bad input


def test_bad_input_is_refused_in_one_line(tmp_path):
    made_up = [{"env": "NCCL_ALGO=tree", "size": KIB, "time": 10.0},
               {"env": "NCCL_ALGO=ring", "size": KIB, "time": 20.0}]
    run = synthetic_run(tmp_path, "ok", made_up)
    assert_refused(invoke(["tune"]), fragment="Missing argument")
    assert_refused(tune(tmp_path / "nothing-here")[0], fragment="does not exist")
    (tmp_path / "a-file").write_text("x")
    assert_refused(tune(tmp_path / "a-file")[0])
    assert_refused(tune(run, run)[0], fragment="is given twice")
    assert_refused(tune(run, "--margin-pct", "-1")[0], fragment="--margin-pct")
    empty = synthetic_run(tmp_path, "empty", [])
    assert_refused(tune(empty)[0], fragment="has no result rows")
    failed = synthetic_run(tmp_path, "failed", made_up)  # a crash is never read as a refusal: the run is refused
    store.update_meta(failed, status=store.STATUS_FAILED,
                      reason="combination NCCL_ALGO=nvls failed: rank 1 exited with code -9 (SIGKILL)")
    assert_refused(tune(failed)[0], fragment="did not complete (status failed: combination NCCL_ALGO=nvls failed")
    store.update_meta(failed, status=store.STATUS_RUNNING, reason=None)
    assert_refused(tune(failed)[0], fragment="did not complete (status running)")
    one_env = synthetic_run(tmp_path, "one-env", [{"env": "NCCL_ALGO=tree", "size": KIB, "time": 10.0}])
    assert_refused(tune(one_env)[0], fragment="one environment only (NCCL_ALGO=tree)")
    assert_refused(tune(run, synthetic_run(tmp_path, "again", made_up))[0], fragment="both measured")
    hostless = synthetic_run(tmp_path, "hostless", made_up, hosts=())
    assert_refused(tune(hostless)[0], fragment="records no hosts")
    assert tune(hostless, "--any-topology")[0].exit_code == 0
    assert_refused(invoke(["tune", str(run), "--out", str(tmp_path)]), fragment="is a folder")
    ddp = tmp_path / "a-ddp-run"
    ddp.mkdir()
    store.write_meta(ddp, {"schema_version": store.SCHEMA_VERSION, "kind": "ddp", "run_id": "a-ddp-run",
                           "status": store.STATUS_COMPLETE})
    assert_refused(tune(ddp)[0], fragment="not collective rows")
