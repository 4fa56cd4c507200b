"""Rates per rank and MFU (commbench/training/flops.py) and the table's footnotes on rates and peak memory."""

import math

import pandas as pd
import pytest

from commbench.benches.training import RESULT_COLUMNS
from commbench.training.flops import PEAKS, peak_for, rate_columns, synthetic_flops_per_token
from commbench.training.spec import ModelShape
from commbench.training.synthetic import count_params
from commbench.training.table import format_training_table, key_numbers, short_labels


@pytest.mark.no_process
def test_tokens_per_rank_times_ranks_is_the_global_rate():
    for world in (1, 2, 8):
        columns = rate_columns(tokens_per_s=12_345.0, world=world, flops_per_token=6_000, device_type="cpu",
                               device_name="some CPU", precision="fp32")
        assert columns["tokens_per_s_per_rank"] * world == pytest.approx(12_345.0)
        assert columns["model_tflops_per_rank"] == pytest.approx(12_345.0 / world * 6_000 / 1e12)


@pytest.mark.no_process
def test_mfu_is_absent_on_cpu_and_on_an_unknown_gpu_with_the_reason():
    cpu = rate_columns(tokens_per_s=1e4, world=2, flops_per_token=6e6, device_type="cpu",
                       device_name="Intel(R) Xeon(R)", precision="fp32")
    assert cpu["mfu_pct"] is None and cpu["peak_tflops"] is None and "cpu" in cpu["mfu_note"]
    unknown = rate_columns(tokens_per_s=1e4, world=2, flops_per_token=6e6, device_type="cuda",
                           device_name="NVIDIA L4", precision="bf16")
    assert unknown["mfu_pct"] is None and "'NVIDIA L4'" in unknown["mfu_note"]
    # the PCIe and NVL parts have lower peaks than the SXM ones in the table: never matched to them
    for name in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL"):
        assert peak_for(name, "bf16")[0] is None, name


@pytest.mark.parametrize("name, model", [("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-PCIE-40GB", "A100"),
                                         ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H200", "H200"),
                                         ("NVIDIA B200", "B200")])
@pytest.mark.no_process
def test_mfu_from_the_peak_table_for_the_names_torch_gives(name, model):
    [entry] = [peak for peak in PEAKS if peak.model == model]
    for precision in ("bf16", "tf32", "fp32"):
        peak, note = peak_for(name, precision)
        assert peak == entry.tflops[precision] and model in note and entry.source in note
    # 20,000 tokens/s per rank of a 1B-parameter model: 120 TFLOPS per rank, a realistic fraction of any peak here
    columns = rate_columns(tokens_per_s=40_000.0, world=2, flops_per_token=6 * 10**9, device_type="cuda",
                           device_name=name, precision="bf16")
    assert 0 < columns["mfu_pct"] <= 100
    assert columns["mfu_pct"] == pytest.approx(100 * 120 / entry.tflops["bf16"])
    assert peak_for(name, "tf32")[0] < peak_for(name, "bf16")[0]


@pytest.mark.no_process
def test_flops_per_token_follow_the_synthetic_model():
    mlp = ModelShape(kind="mlp", layers=3, hidden=128, seq_len=32)
    assert synthetic_flops_per_token(mlp) == 6 * count_params(mlp)  # no embedding, no attention
    transformer = ModelShape(kind="transformer", layers=2, hidden=128, heads=4, seq_len=64)
    embedding = transformer.vocab * transformer.hidden  # a lookup: no multiply; the LM head counts
    assert synthetic_flops_per_token(transformer) == (6 * (count_params(transformer) - embedding)
                                                      + 12 * 2 * 128 * 64)


def _row(device: str, **extra) -> dict:
    row = dict.fromkeys(RESULT_COLUMNS)
    row.update(schema_version=1, run_id="hand", bench="ddp", config_index=0, config="ddp", strategy="ddp", impl="ddp",
               backend="gloo", device=device, world_size=2, model_kind="mlp", params=1e6, micro_batch=1,
               accum_steps=1, global_batch=2, step_time_ms_p50=100.0, step_time_ms_p95=110.0,
               step_time_ms_ci_lo=95.0, step_time_ms_ci_hi=105.0, samples_per_s=20.0, peak_mem_bytes=2**29,
               comm_ms=1.0, exposed_comm_ms=0.5, exposed_comm_ms_nosync=0.6, overlap_pct=50.0,
               model_state_bytes=77 * 2**20, model_state_bytes_predicted=77 * 2**20, fits=True, n_wrong=0, **extra)
    return row


@pytest.mark.no_process
def test_footnotes_say_which_rate_is_global_and_what_peak_memory_is():
    cpu = pd.DataFrame([_row("cpu", **rate_columns(tokens_per_s=640.0, world=2, flops_per_token=6e6,
                                                   device_type="cpu", device_name="x", precision="fp32"))])
    table = format_training_table(cpu)
    assert "(all ranks)" in table.splitlines()[1] and "(per rank)" in table.splitlines()[1]
    assert "samples/s = all ranks together" in table and "tokens/s per rank = global tokens/s ÷ ranks" in table
    assert "MFU absent: no MFU on cpu" in table
    assert "peak resident set" in table and "most of it torch itself" in table
    assert "torch's CUDA allocator" not in table
    assert key_numbers(cpu)["tokens/s per rank"].tolist() == [320.0]
    gpu = pd.DataFrame([_row("cuda", **rate_columns(tokens_per_s=4e4, world=2, flops_per_token=6e9,
                                                    device_type="cuda", device_name="NVIDIA H200",
                                                    precision="bf16"))])
    table = format_training_table(gpu)
    assert "torch's CUDA allocator" in table and "peak used: H200 dense bf16 peak" in table
    [mfu] = key_numbers(gpu)["MFU (%)"].tolist()
    assert 0 < mfu <= 100


@pytest.mark.no_process
def test_a_run_without_the_rate_columns_still_makes_its_table():
    old = pd.DataFrame([_row("cpu")]).drop(columns=["tokens_per_s_per_rank", "mfu_pct", "mfu_note"])
    table = format_training_table(old)
    assert "MFU absent: not recorded in this run" in table
    assert math.isnan(key_numbers(old)["MFU (%)"].iloc[0])


@pytest.mark.no_process
def test_every_row_shows_its_precision_in_the_table_and_the_reports_key_numbers():
    # the same configuration in bf16 and fp32, and a row from a run that did not record a precision (it ran fp32)
    results = pd.DataFrame([_row("cuda", mixed_precision="bf16"), _row("cuda", mixed_precision="fp32"),
                            _row("cpu")]).assign(config_index=[0, 1, 2])
    numbers = key_numbers(results)
    assert list(numbers.columns[:2]) == ["configuration", "precision"]
    assert numbers["precision"].tolist() == ["bf16", "fp32", "fp32"]
    lines = format_training_table(results).splitlines()
    assert lines[0].split()[:2] == ["configuration", "precision"]
    cells = [line.split()[len(label.split())] for line, label in zip(lines[2:5], short_labels(results))]
    assert cells == ["bf16", "fp32", "fp32"]
