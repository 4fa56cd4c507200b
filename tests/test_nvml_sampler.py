"""GPU sampling: the path without NVML, and the summary of recorded samples."""

import pytest

from commbench.profiling.nvml_sampler import GpuSample, combine_ranks, nvml_unavailable_reason, summarize


def test_without_nvml_the_reason_is_given_and_nothing_crashes():
    reason = nvml_unavailable_reason()
    if reason is None:
        pytest.skip("NVML is available on this machine")
    assert reason.startswith("NVML not available (")


RECORDED = [  # 3 samples 0.5 s apart: cumulative counters rise, gauges vary
    GpuSample(t_s=10.0, mem_used_bytes=1_000, util_pct=50.0, power_mw=100_000, energy_mj=5_000_000,
              nvlink_tx_kib=1_000_000, nvlink_rx_kib=2_000_000),
    GpuSample(t_s=10.5, mem_used_bytes=3_000, util_pct=100.0, power_mw=300_000, energy_mj=5_100_000,
              nvlink_tx_kib=1_500_000, nvlink_rx_kib=2_000_000),
    GpuSample(t_s=11.0, mem_used_bytes=2_000, util_pct=0.0, power_mw=200_000, energy_mj=5_200_000,
              nvlink_tx_kib=2_000_000, nvlink_rx_kib=2_250_000),
]


def test_summary_of_recorded_samples():
    summary = summarize(RECORDED)
    assert summary["gpu_mem_used_peak_bytes"] == 3_000
    assert summary["gpu_util_pct_mean"] == pytest.approx(50.0)
    assert summary["power_w_mean"] == pytest.approx(200.0)
    assert summary["energy_j"] == pytest.approx(200.0)  # 5.2e6 − 5.0e6 mJ
    assert summary["nvlink_tx_gbps_mean"] == pytest.approx(1_000_000 * 1024 / 1.0 / 1e9)  # KiB diff over 1 s
    assert summary["nvlink_rx_gbps_mean"] == pytest.approx(250_000 * 1024 / 1.0 / 1e9)


def test_missing_metrics_stay_empty():
    summary = summarize([GpuSample(t_s=1.0, mem_used_bytes=5), GpuSample(t_s=2.0)])
    assert summary["gpu_mem_used_peak_bytes"] == 5
    assert summary["power_w_mean"] is None and summary["energy_j"] is None and summary["nvlink_tx_gbps_mean"] is None


def test_combining_ranks():
    combined = combine_ranks([summarize(RECORDED), summarize(RECORDED[:2]), {}])
    assert combined["gpu_mem_used_peak_bytes"] == 3_000
    assert combined["power_w_mean"] == pytest.approx(200.0 + 200.0)  # the job's draw: GPUs add up
    assert combined["energy_j"] == pytest.approx(200.0 + 100.0)
    assert combine_ranks([{}])["gpu_util_pct_mean"] is None
