"""The analytic models against values worked out by hand (in the comments), not by the code under test."""

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.models import comm_volume, memory
from commbench.models.alpha_beta import fit_line
from commbench.models.fit_files import LOW_FIT_ADVICE
from commbench.models.shard_layout import formula_at_rest
from commbench.models.strategies import KEYS, STRATEGIES, display_name

GB, GIB = 10**9, 2**30


def totals(params, ranks, preset, shard_group=None):
    rows = memory.table(params=params, ranks=ranks, state=memory.PRESETS[preset], shard_group=shard_group)
    return {row.strategy: row.total_bytes for row in rows}


@pytest.mark.no_process
def test_zero_paper_figure_1():
    # ZeRO paper, Fig. 1: Ψ = 7.5B, N = 64, K = 12 → 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    # by hand: 16·7.5 = 120; 4·7.5 + 12·7.5/64 = 31.406; 2·7.5 + 14·7.5/64 = 16.641; 120/64 = 1.875
    got = totals(7.5e9, 64, "mixed-adam")
    assert got["ddp"] == pytest.approx(120 * GB)
    assert got["zero1"] == pytest.approx(31.40625 * GB)
    assert got["zero2"] == pytest.approx(16.640625 * GB)
    assert got["zero3"] == pytest.approx(1.875 * GB)


@pytest.mark.no_process
def test_fp32_adam_7b_8_ranks():
    # P4 G4 O8: DDP 16·7 = 112 GB; ZeRO-1 8·7 + 8·7/8 = 63; ZeRO-2 4·7 + 12·7/8 = 38.5; ZeRO-3 112/8 = 14
    got = totals(7e9, 8, "fp32-adam")
    assert [got[s] / GB for s in ("ddp", "zero1", "zero2", "zero3")] == pytest.approx([112, 63, 38.5, 14])


@pytest.mark.no_process
def test_mixed_adam_7b_8_ranks_in_gib():
    # P2 G2 O12: DDP 112e9 B = 104.308 GiB; ZeRO-3 14e9 B = 13.039 GiB; HSDP over groups of 4: 28e9 B = 26.077 GiB
    got = totals(7e9, 8, "mixed-adam", shard_group=4)
    assert got["ddp"] / GIB == pytest.approx(104.3081, abs=1e-4)
    assert got["zero3"] / GIB == pytest.approx(13.0385, abs=1e-4)
    assert got["hsdp"] / GIB == pytest.approx(26.0770, abs=1e-4)


@pytest.mark.no_process
def test_parts_per_rank():
    row = memory.state_per_rank("zero2", params=1e9, ranks=4, state=memory.PRESETS["bf16-fp32grad-adam"])
    # P2 unsharded = 2e9; G4 / 4 = 1e9; O12 / 4 = 3e9
    assert (row.param_bytes, row.grad_bytes, row.optim_bytes) == (2e9, 1e9, 3e9)


@pytest.mark.no_process
def test_min_ranks_to_fit():
    state = memory.PRESETS["mixed-adam"]
    # 7B in 80 GB: DDP 112 GB never; ZeRO-1 28 + 84/N ≤ 80 → N ≥ 1.62 → 2; ZeRO-3 112/N ≤ 80 → 2
    assert memory.min_ranks_to_fit("ddp", params=7e9, state=state, capacity_bytes=80 * GB) is None
    assert memory.min_ranks_to_fit("zero1", params=7e9, state=state, capacity_bytes=80 * GB) == 2
    # 70B in 80 GB: ZeRO-1 fixed 280 GB > 80 → never; ZeRO-3 1120/80 = 14 exactly → 14
    assert memory.min_ranks_to_fit("zero1", params=70e9, state=state, capacity_bytes=80 * GB) is None
    assert memory.min_ranks_to_fit("zero3", params=70e9, state=state, capacity_bytes=80 * GB) == 14


@pytest.mark.no_process
def test_comm_volume_zero3_is_1_5x_ddp():
    rows = {row.strategy: row for row in comm_volume.traffic(params=7e9, ranks=8, dtype_bytes=2)}
    # DDP: 2·(7/8)·7e9·2 B = 24.5e9; ZeRO-3: 3·(7/8)·7e9·2 = 36.75e9
    assert rows["ddp"].bytes_sent_per_rank == pytest.approx(24.5e9)
    assert rows["zero3"].bytes_sent_per_rank == pytest.approx(36.75e9)
    assert rows["zero3"].ratio_to_ddp == 1.5 and rows["zero1"].ratio_to_ddp == 1.0


@pytest.mark.no_process
def test_comm_time_alpha_beta():
    # DDP, N = 8: 2 phases × (7 × 10 µs + (7/8)·14e9 B / 400e9 B/s) = 2 × (70e-6 + 0.030625) s = 61.39 ms
    rows = {row.strategy: row for row in comm_volume.traffic(params=7e9, ranks=8, dtype_bytes=2, alpha_us=10,
                                                             busbw_gbps=400)}
    assert rows["ddp"].time_s == pytest.approx(0.06139)


@pytest.mark.no_process
def test_fit_recovers_alpha_and_bandwidth_from_noisy_timings():
    rng = np.random.default_rng(7)
    sizes = np.array([2.0**k for k in range(10, 27)])
    times = (25.0 + sizes / 2500.0) * (1 + rng.normal(0, 0.02, len(sizes)))  # α 25 µs, 2.5 GB/s, 2 % noise
    fit = fit_line(sizes, times)
    assert fit.alpha_us == pytest.approx(25.0, rel=0.05)
    assert 1e-3 / fit.us_per_byte == pytest.approx(2.5, rel=0.03)
    assert fit.r2 > 0.99


@pytest.mark.no_process
def test_the_fit_weighs_each_point_by_its_relative_error():
    """fit_line is least squares of t = α + β·S with weights 1/t² (each point's error in percent): numpy's polyfit
    with w = 1/t (it weighs the residuals, so their squares by 1/t²) gives the same line on points off any line."""
    sizes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    times = np.array([12.0, 15.0, 60.0, 380.0, 4300.0])
    beta, alpha = np.polyfit(sizes, times, 1, w=1 / times)
    fit = fit_line(sizes, times)
    assert (fit.alpha_us, fit.us_per_byte) == pytest.approx((alpha, beta), rel=1e-9)


@pytest.mark.no_process
def test_memory_json():
    result = CliRunner().invoke(main, ["model", "memory", "--params", "7B", "--ranks", "8", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["strategy"]: row for row in json.loads(result.output)["per_rank"]}
    assert rows["ZeRO-3/FSDP"]["total_bytes"] == pytest.approx(14e9)
    assert {"strategy", "param_bytes", "grad_bytes", "optim_bytes", "total_bytes"} <= set(rows["DDP"])


@pytest.mark.no_process
def test_one_strategy_table():
    assert KEYS == ("ddp", "zero1", "zero2", "zero3", "hsdp")
    assert [display_name(key) for key in KEYS] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP", "HSDP"]
    assert [STRATEGIES[key].sharded for key in KEYS] == [(False, False, False), (False, False, True),
                                                         (False, True, True), (True, True, True), (True, True, True)]
    assert comm_volume.PHASES == {"ddp": 2, "zero1": 2, "zero2": 2, "zero3": 3}
    # at rest FSDP's ZeRO-2 has resharded its parameters (ZeRO-3's state); the partitioned ZeRO-2 keeps them whole
    assert [formula_at_rest(key, "fsdp2") for key in KEYS] == ["ddp", "zero1", "zero3", "zero3", "hsdp"]
    assert formula_at_rest("zero2", "fsdp1") == "zero3" and formula_at_rest("zero2", "zero2") == "zero2"


@pytest.mark.no_process
def test_tables_print_display_names():
    memory_out = CliRunner().invoke(main, ["model", "memory", "--params", "7B", "--ranks", "8", "--shard-group", "4",
                                           "--fit", "80GB"]).output
    assert [line.split()[0] for line in memory_out.splitlines()[2:7]] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP",
                                                                          "HSDP"]
    assert "shard group 2" in memory_out.splitlines()[6]
    comm_out = CliRunner().invoke(main, ["model", "comm", "--params", "7B", "--ranks", "8", "--json"]).output
    assert [row["strategy"] for row in json.loads(comm_out)["per_step"]] == ["DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP"]


# `model memory` and `model comm` answer on a laptop without torch: their modules import nothing heavy. The cli
# package imports every command, so commbench.cli.model is loaded here under an empty stand-in for it.
LIGHT_IMPORT = """
import importlib, pathlib, sys, types
import commbench
if {module!r}.startswith("commbench.cli."):
    package = types.ModuleType("commbench.cli")
    package.__path__ = [str(pathlib.Path(commbench.__file__).parent / "cli")]
    sys.modules["commbench.cli"] = package
importlib.import_module({module!r})
print(",".join(m for m in ("torch", "numpy", "pandas", "scipy", "matplotlib") if m in sys.modules))
"""


@pytest.mark.parametrize("module", ["commbench.cli.model", "commbench.models.memory", "commbench.models.comm_volume",
                                    "commbench.models.strategies", "commbench.models.shard_layout"])
def test_model_commands_import_nothing_heavy(module):
    result = subprocess.run([sys.executable, "-c", LIGHT_IMPORT.format(module=module)], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == ""


@pytest.mark.no_process
def test_memory_table_states_its_assumptions():
    result = CliRunner().invoke(main, ["model", "memory", "--params", "7B", "--ranks", "8", "--preset", "fp32-adam",
                                       "--units", "GiB", "--fit", "80GiB"])
    assert result.exit_code == 0, result.output
    assert "P=4 G=4 O=8 bytes/parameter" in result.output and "1 GiB = 1073741824 B" in result.output
    assert "min ranks to fit 80GiB" in result.output


@pytest.mark.no_process
@pytest.mark.parametrize("args", [
    ["model", "memory", "--params", "-7B", "--ranks", "8"],
    ["model", "memory", "--params", "7X", "--ranks", "8"],
    ["model", "memory", "--params", "7B", "--ranks", "0"],
    ["model", "memory", "--params", "7B", "--ranks", "8", "--preset", "adam16"],
    ["model", "memory", "--params", "7B", "--ranks", "8", "--fit", "80"],
    ["model", "memory", "--params", "7B", "--ranks", "8", "--shard-group", "3"],
    ["model", "memory", "--params", "7B", "--ranks", "8", "--param-bytes", "2"],
    ["model", "comm", "--params", "7B", "--ranks", "8", "--alpha-us", "5"],
    ["model", "comm", "--params", "7B", "--ranks", "-1"],
    ["fit", "/nonexistent/run"],
])
def test_bad_input_exits_2_with_one_line(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


@pytest.mark.distributed
def test_fit_of_a_real_sweep_writes_files(bare_sweep):
    assert bare_sweep.returncode == 0, bare_sweep.stderr
    run_dir = bare_sweep.run_dir / "collectives"  # the default suite: 1 KiB-16 MiB, 15 sizes
    result = CliRunner().invoke(main, ["fit", str(run_dir)])
    assert result.exit_code == 0, result.output
    fits = (run_dir / "fit.csv").read_text().splitlines()
    assert fits[0].startswith("schema_version,collective,impl,backend,world_size,dtype,op,inplace,timing,env,n_points,"
                              "alpha_us")
    first = fits[1].split(",")
    backend = json.loads((run_dir / "meta.json").read_text())["backend"]
    assert first[1:4] == ["all_reduce", "builtin", backend] and first[8:11] == ["batch", "", "15"]
    # one fit per collective and impl (the default suite: the three builtin collectives), one residual per point
    assert len(fits) == 1 + 3
    assert len((run_dir / "fit_residuals.csv").read_text().splitlines()) == 1 + 45
    comm = CliRunner().invoke(main, ["model", "comm", "--params", "1B", "--ranks", "4", "--from", str(run_dir)])
    if comm.exit_code == 2:  # this machine's all_reduce fit came out low: refused in fit's words, unless allowed
        assert LOW_FIT_ADVICE in comm.output, comm.output
        comm = CliRunner().invoke(main, ["model", "comm", "--params", "1B", "--ranks", "4", "--from", str(run_dir),
                                         "--allow-poor-fit"])
    assert comm.exit_code == 0, comm.output
    assert "fitted from" in comm.output and "time (ms)" in comm.output


def _rows(times_by_size: dict[int, float]):
    import pandas as pd

    return pd.DataFrame([{"bench": "collective", "collective": "all_reduce", "impl": "builtin", "backend": "gloo",
                          "world_size": 2, "dtype": "float32", "op": "sum", "inplace": True, "size_bytes": size,
                          "time_us_p50": time} for size, time in times_by_size.items()])


@pytest.mark.no_process
def test_each_timing_mode_gets_its_own_fit():
    """Per-iteration and batch times of one sweep are two measurements of each size: one fit each, never one line
    through both; rows of files written before the timing column fit as per-iteration."""
    import pandas as pd

    from commbench.models.alpha_beta import fit_results

    sizes = [2**k for k in range(10, 20)]
    per_iteration = _rows({size: 20 + size / 1000 for size in sizes}).assign(timing="per-iteration")
    batch = _rows({size: 5 + size / 2000 for size in sizes}).assign(timing="batch")
    fits = {fit.timing: fit for fit in fit_results(pd.concat([per_iteration, batch], ignore_index=True))}
    assert sorted(fits) == ["batch", "per-iteration"] and all(fit.n_points == len(sizes) for fit in fits.values())
    assert fits["per-iteration"].alpha_us == pytest.approx(20) and fits["batch"].alpha_us == pytest.approx(5)
    assert fits["batch"].algbw_gbps == pytest.approx(2 * fits["per-iteration"].algbw_gbps)
    [old_file] = fit_results(_rows({size: 20 + size / 1000 for size in sizes}))  # no timing column
    assert old_file.timing == "per-iteration"


@pytest.mark.no_process
def test_piecewise_note_needs_a_real_knee():
    from commbench.models.alpha_beta import fit_results

    sizes = [2**k for k in range(10, 24)]
    straight = fit_results(_rows({s: 20 + s / 1000 for s in sizes}))[0]
    assert straight.note == "" and straight.r2 == pytest.approx(1.0)
    # protocol switch at 1 MiB: latency-bound below, a slower bandwidth above
    knee = fit_results(_rows({s: (20 + s / 1000) if s < 2**20 else (500 + s / 300) for s in sizes}))[0]
    assert knee.note.startswith("piecewise: two lines split at 1 MiB")


@pytest.mark.no_process
def test_fit_ignores_unusable_times():
    from commbench.models.alpha_beta import fit_results

    fit = fit_results(_rows({1024: 0.0, 2048: float("nan"), 4096: 24.0, 8192: 28.0, 16384: 36.0}))[0]
    assert fit.n_points == 3


@pytest.mark.no_process
def test_fit_says_when_it_resolves_nothing():
    from commbench.models.alpha_beta import fit_results

    fit = fit_results(_rows({1024: 900.0, 1048576: 800.0}))[0]
    assert np.isnan(fit.algbw_gbps)
    assert "bandwidth unresolved" in fit.note and "two sizes only" in fit.note
