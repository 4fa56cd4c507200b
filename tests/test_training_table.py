"""The training end table as a person reads it: DDP's rows named by what their buckets are, one exposed-communication
column (the others with --verbose), a bucket count, a ranking that says what the noise allows (significantly faster,
tied, and the steps that would separate a tie), --steps down to 2 without a CI, and a time estimate before a long CPU
run. Hand-made rows: the properties hold whatever a machine measures."""

import math
import warnings

import pandas as pd
import pytest

from commbench.benches.ddp import KIND as DDP
from commbench.benches.options import parse_options
from commbench.benches.training import RESULT_COLUMNS
from commbench.errors import CommbenchError, CommbenchWarning
from commbench.machine import Machine
from commbench.report.html_tables import fitted_tables
from commbench.training import bucket_caps, ddp_buckets, plan, time_estimate
from commbench.training.ranking import ranking, steps_to_separate, throughput_ci
from commbench.training.spec import TrainConfig, TrainSpec, validate
from commbench.training.synthetic import ModelShape, count_params
from commbench.training.table import WRAP, format_training_table, key_numbers, short_labels

CPU_ONLY = Machine(gpus=0, nccl_available=False)
SHAPE = ModelShape(kind="transformer", layers=4, hidden=256, heads=4, seq_len=64, vocab=4096)  # the CPU default


def _row(index: int, *, p50: float, lo: float, hi: float, steps: int = 10, cap=None, first=None, buckets=None,
         fits=True, n_wrong=0, **extra) -> dict:
    row = dict.fromkeys(RESULT_COLUMNS)
    row.update(schema_version=1, run_id="hand", bench="ddp", config_index=index, config=f"c{index}", strategy="ddp",
               impl="ddp", backend="gloo", device="cpu", world_size=2, model_kind="transformer",
               params=count_params(SHAPE), micro_batch=2, accum_steps=1, global_batch=4, steps=steps,
               bucket_cap_mb=cap, first_bucket_mb=first, bucket_count=buckets, step_time_ms_p50=p50,
               step_time_ms_p95=p50 * 1.2, step_time_ms_ci_lo=lo, step_time_ms_ci_hi=hi,
               samples_per_s=4 / (p50 / 1e3), comm_ms=20.0, exposed_comm_ms=12.0, exposed_comm_ms_max=14.0,
               exposed_comm_ms_nosync=9.0, exposed_comm_ms_baseline=10.5, overlap_pct=40.0, peak_mem_bytes=2**29,
               model_state_bytes=2**24, model_state_bytes_predicted=2**24, fits=fits, n_wrong=n_wrong)
    row.update(extra)
    return row


def _default_sweep(times) -> pd.DataFrame:
    """The default DDP sweep of the CPU model (its real caps), with hand-made step times (p50, lo, hi) per row."""
    caps = plan.ddp_default_caps(sum(ddp_buckets.gradient_bytes_in_ready_order(SHAPE)))
    configs = plan.ddp_configs(bucket_cap_mb=caps, gradient_as_bucket_view=(False,), static_graph=(False,),
                               comm_hooks=("none",), accum_steps=(1,))
    return pd.DataFrame([_row(index, cap=config.bucket_cap_mb, first=config.first_bucket_mb, buckets=count,
                              p50=p50, lo=lo, hi=hi)
                         for index, (config, count, (p50, lo, hi)) in enumerate(zip(configs, (2, 8, 3, 1), times))])


TIED = [(100.0, 96.0, 104.0), (102.0, 97.0, 106.0), (101.0, 95.0, 108.0), (99.0, 95.0, 103.0)]


@pytest.mark.no_process
def test_the_default_row_says_default_and_its_layout_and_caps_say_what_they_are():
    labels = short_labels(_default_sweep(TIED))
    assert labels[0] == "ddp default (1 MiB first, then 25 MiB)"
    gradient_mib = 4 * count_params(SHAPE) / 2**20
    fractions = ["1/16", "1/4", "all"]
    for label, fraction, share in zip(labels[1:], fractions, (1 / 16, 1 / 4, 1)):
        assert label.startswith(f"ddp cap {fraction} grads = ") and label.endswith(" MiB")
        cap = float(label.split(" = ")[1].split()[0])
        assert gradient_mib * share <= cap < gradient_mib * share * 1.1  # rounded up to two digits, never down
    # an explicit 25 is not the default: its first bucket is as large as the rest
    assert bucket_caps.bucket_label(25.0, None, count_params(SHAPE)) == "cap 25 MiB"
    assert bucket_caps.bucket_label(4.0, 0.5, count_params(SHAPE)) == "cap 4 MiB, first 0.5 MiB"


@pytest.mark.no_process
def test_the_tables_default_layout_is_torchs():
    assert (bucket_caps.DDP_DEFAULT_CAP_MB, bucket_caps.DDP_DEFAULT_FIRST_MB) == (ddp_buckets.TORCH_CAP_MB,
                                                                                 ddp_buckets.TORCH_FIRST_MB)


def _cell(table: str, row: int, name: str) -> str:
    """The cell of column `name` in data row `row` (columns are right-aligned: it ends where its header does)."""
    lines = table.splitlines()
    end = lines[0].index(f" {name}") + 1 + len(name)
    return lines[2 + row][:end].split()[-1]


@pytest.mark.no_process
def test_one_exposed_column_a_bucket_count_and_the_others_with_verbose():
    results = _default_sweep(TIED)
    short, verbose = format_training_table(results), format_training_table(results, verbose=True)
    header = short.splitlines()[0]
    assert header.count("exposed") == 1 and "no_sync" not in header and "trace" not in header
    assert _cell(short, 0, "exposed") == "10.5"  # the paired cost against compute, not the trace's 12.0
    assert [_cell(short, row, "buckets") for row in range(4)] == ["2", "8", "3", "1"]
    assert [_cell(verbose, 0, name) for name in ("exposed", "trace exp", "trace max", "no_sync Δ")] == \
        ["10.5", "12.0", "14.0", "9.0"]
    assert "buckets" not in format_training_table(results.assign(bucket_count=None)).splitlines()[0]
    assert max(len(line) for line in short.splitlines() if not line.startswith("#")) <= WRAP


def _ranking_lines(table: str) -> list[str]:
    """The ranking's entries, each joined back from its wrapped lines."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# ranking"))
    entries: list[str] = []
    for line in lines[start + 1:]:
        if line.startswith("#       "):
            if entries:  # the header's own continuation lines come before any entry
                entries[-1] += " " + line[1:].strip()
        elif line.startswith("#   "):
            entries.append(line[1:].strip())
    return entries


@pytest.mark.no_process
def test_the_ranking_says_significantly_faster_and_tied_with_the_steps_that_would_separate():
    # A and B overlap, both are clear of C; C and D overlap each other
    results = _default_sweep([(100.0, 96.0, 104.0), (103.0, 99.0, 107.0), (115.0, 110.0, 119.0),
                              (117.0, 113.0, 121.0)])
    labels = short_labels(results)
    table = format_training_table(results)
    entries = _ranking_lines(table)
    assert [entry.split(".")[0] for entry in entries] == ["1", "1", "3", "3"]  # 1 + those significantly faster
    first, second, third, _ = entries
    assert f"significantly faster than {labels[2]}, {labels[3]}" in first
    steps = steps_to_separate(10, results.loc[0], results.loc[1])
    assert f"tied with {labels[1]} (~{steps} steps would separate them at this spread)" in first
    assert f"significantly faster than {labels[2]}, {labels[3]}" in second and "tied" not in second
    assert f"tied with {labels[3]} (~" in third
    best = next(line for line in table.splitlines() if line.startswith("# best:"))
    assert best.startswith(f"# best: {labels[0]}") and f"not significantly faster than {labels[1]}" in best
    for line in table.splitlines()[table.splitlines().index(best) + 1:]:
        assert len(line) <= WRAP


@pytest.mark.no_process
def test_the_steps_that_would_separate_a_tie_part_the_cis_at_the_measured_spread():
    results = _default_sweep([(100.0, 96.0, 104.0), (103.0, 99.0, 107.0), (101.0, 90.0, 130.0),
                              (100.5, 99.0, 102.0)])
    ranked, _ = ranking(results)
    for entry in ranked:
        faster = results.loc[entry.index]
        for index, needed in entry.tied_with:
            slower = results.loc[index]
            fast_ci, slow_ci = throughput_ci(faster), throughput_ci(slower)
            facing = (faster["samples_per_s"] - fast_ci[0]) + (slow_ci[1] - slower["samples_per_s"])
            difference = faster["samples_per_s"] - slower["samples_per_s"]
            assert needed >= 10 and facing >= difference  # a tie now, at --steps 10
            assert facing * math.sqrt(10 / needed) <= difference  # apart at the steps named, half-widths ∝ 1/√n
            if needed > 10:
                assert facing * math.sqrt(10 / (needed - 1)) > difference  # and not one step earlier


@pytest.mark.no_process
def test_equal_medians_are_a_tie_no_number_of_steps_separates():
    results = _default_sweep([(100.0, 96.0, 104.0), (100.0, 95.0, 106.0), (150.0, 140.0, 160.0),
                              (151.0, 141.0, 161.0)])
    table = format_training_table(results)
    assert "equal medians: no number of steps would separate them" in " ".join(_ranking_lines(table))


@pytest.mark.no_process
def test_rows_that_do_not_fit_or_failed_are_not_ranked_and_a_single_row_is_not_ranked_at_all():
    rows = _default_sweep(TIED)
    rows.loc[2, "fits"], rows.loc[3, "n_wrong"] = False, 1
    labels = short_labels(rows)
    entries = _ranking_lines(format_training_table(rows))
    assert entries[-1] == f"not ranked: {labels[2]} (does not fit), {labels[3]} (failed the check)"
    assert not [line for line in format_training_table(rows.iloc[:1]).splitlines() if "ranking" in line]


@pytest.mark.no_process
def test_fewer_than_six_steps_rank_nothing_beyond_the_point_figures():
    results = _default_sweep([(p50, math.nan, math.nan) for p50, _, _ in TIED]).assign(steps=2)
    table = format_training_table(results)
    [line] = [line for line in table.splitlines() if line.startswith("# ranking")]
    assert line.startswith("# ranking: none beyond the point figures") and "below 6 steps" in line
    assert "tied" not in table and "significantly" not in table
    assert [_cell(table, row, "p50 95% CI") for row in range(4)] == ["n/a"] * 4


@pytest.mark.no_process
def test_steps_go_down_to_two_with_a_note_that_no_ci_is_possible():
    spec = TrainSpec(bench="ddp", configs=(TrainConfig(strategy="ddp", impl="ddp"),), shape=SHAPE, micro_batch=2,
                     steps=2, warmup_steps=2, profile_steps=1, seed=0, lr=1e-4, backend="gloo", device="cpu",
                     nproc=2)
    validate(spec)
    with pytest.raises(CommbenchError, match="--steps 1 is too few"):
        validate(TrainSpec(**{**vars(spec), "steps": 1}))
    bench = DDP.resolve(parse_options(DDP.options, {"backend": "gloo", "device": "cpu", "steps": 2,
                                                    "params": "1M", "layers": 2, "seq_len": 16}), CPU_ONLY)
    assert [note for note in bench.notes if "no 95 % CI of the median step time is possible" in note]
    assert not [note for note in DDP.resolve(parse_options(DDP.options, {"backend": "gloo", "device": "cpu",
                                                                         "params": "1M", "layers": 2,
                                                                         "seq_len": 16}), CPU_ONLY).notes
                if "95 % CI" in note]


@pytest.mark.no_process
def test_the_reports_key_numbers_hold_one_exposed_column_and_fit_the_page():
    numbers = key_numbers(_default_sweep([(1296.8, 1134.3, 1492.7), (1951.1, 1716.3, 2426.4), (826.4, 526.8, 1010.4),
                                          (952.4, 574.7, 1934.3)]))
    assert [name for name in numbers.columns if "exposed" in name or "no_sync" in name] == ["exposed comm (ms)"]
    assert list(numbers.columns[-2:]) == ["#wrong", "best"] and "DDP buckets (count)" in numbers
    assert fitted_tables(numbers, classes="key-numbers").count("<table") == 1


@pytest.mark.no_process
def test_a_long_cpu_run_is_estimated_before_it_starts():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DDP.resolve(parse_options(DDP.options, {"backend": "gloo", "device": "cpu", "params": "1B"}), CPU_ONLY)
    [line] = [str(warning.message) for warning in caught if issubclass(warning.category, CommbenchWarning)]
    assert line.startswith("this run computes for at least ~") and "--steps 2 --profile-steps 1" in line


@pytest.mark.no_process
def test_the_estimate_counts_every_pass_and_stays_quiet_below_a_minute():
    config = TrainConfig(strategy="ddp", impl="ddp", accum_steps=2)
    spec = TrainSpec(bench="ddp", configs=(config, TrainConfig(strategy="zero3", impl="fsdp2")), shape=SHAPE,
                     micro_batch=2, steps=10, warmup_steps=2, profile_steps=3, seed=0, lr=1e-4, backend="gloo",
                     device="cpu", nproc=2)
    # warm-up 2 + timed 10 + profiled 3 + paired real 10, baseline warm-up 2 + paired 10, DDP 1 + 2 × 10 no_sync
    assert time_estimate.passes_per_config(spec, config) == (2 + 10 + 3 + 10 + 2 + 10 + 21) * 2
    assert time_estimate.passes_per_config(spec, spec.configs[1]) == 2 + 10 + 3 + 10 + 2 + 10
    quick = time_estimate.estimate(spec, rate=math.inf)
    assert quick.seconds == 0 and time_estimate.estimate_text(quick) is None
    slow = time_estimate.estimate(spec, rate=1.0)  # any model at 1 FLOP/s takes more than a minute
    assert time_estimate.estimate_text(slow).startswith("this run computes for at least ~")
    assert time_estimate.host_rate(spec) > 0


@pytest.mark.distributed
def test_a_two_step_smoke_run_shows_its_table_without_a_ci(run_commbench):
    run = run_commbench("ddp", "--model", "mlp", "--params", "1M", "--layers", "2", "--seq-len", "16",
                        "--micro-batch", "1", "--steps", "2", "--profile-steps", "1", "--isolation", "reset",
                        "--bucket-cap-mb", "default,0.25")
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert [line for line in lines if line.startswith("# note: --steps 2: no 95 % CI")]
    rows = [line for line in lines if line.startswith("ddp ")]
    assert [row.split()[:2] for row in rows] == [["ddp", "default"], ["ddp", "cap"]]
    table = "\n".join(line for line in lines if not line.startswith("# note"))
    assert [_cell(table, row, "p50 95% CI") for row in range(2)] == ["n/a", "n/a"]
    assert [line for line in lines if line.startswith("# ranking: none beyond the point figures")]
