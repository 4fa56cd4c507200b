"""GPU sampling: the path without NVML, the sampler's scheduling and counter logic on recorded values, the summary of
recorded samples, combining ranks per GPU (UUID), and the per-point memory window.

NVML needs an NVIDIA driver, which this machine lacks, so the sampler is driven here by RecordedReader: it answers
the few reader calls GpuSampler makes (the ones NvmlReader forwards to NVML) with recorded values and counts them.
Everything but NvmlReader's NVML calls themselves runs as in production.
"""

import gc
import sys
import threading
import time

import pytest
import torch

from commbench.execution.distributed import RankContext
from commbench.measure.timing import measure
from commbench.names import BATCH, PER_ITERATION
from commbench.platform import CpuPlatform
from commbench.profiling.nvml_sampler import (
    ALL_LINKS,
    MARK_END,
    MARK_START,
    GpuSample,
    GpuSampler,
    NvlinkCounters,
    achieved_interval_s,
    combine_ranks,
    nvml_unavailable_reason,
    pcie_every_for,
    rank_summary,
    ranks_sharing_gpu,
    summarize,
    wait_after,
)

pytestmark = pytest.mark.no_process

TX, RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED, what a refused field value carries in nvmlReturn
MiB = 1024 * 1024


class RecordedReader:
    """Stands in for NVML (absent here: no driver): the reader interface of NvmlReader answered from recorded values.

    answers maps (field id, scope id) to the counter's value at each step (the test sets `step`); a pair without an
    answer is refused with NOT_SUPPORTED, as a driver refuses a scope or an absent link. Calls are counted, and the
    threads the gauges were read on are kept.
    """

    links = 18  # NVML_NVLINK_MAX_LINKS on Hopper-era drivers
    nvlink_field_ids = (TX, RX)

    def __init__(self, answers: dict | None = None):
        self.answers = answers or {}
        self.step = 0
        self.gauge_calls = self.pcie_calls = self.field_calls = self.energy_calls = 0
        self.gauge_threads: list[str] = []
        self.field_requests: list[list] = []

    def gauges(self) -> dict:
        self.gauge_calls += 1
        self.gauge_threads.append(threading.current_thread().name)
        return {"mem_used_bytes": 40 * 2**30, "util_pct": 87.0, "power_mw": 412_000, "energy_mj": self.energy_mj(),
                "sm_clock_mhz": 1980}

    def energy_mj(self) -> float:
        self.energy_calls += 1
        return 7_000_000.0 + 1_000.0 * self.step

    def pcie_kibps(self):
        self.pcie_calls += 1
        return 1_200.0, 3_400.0

    def field_values(self, requests):
        self.field_calls += 1
        self.field_requests.append(list(requests))
        return [(0, float(self.answers[key][self.step])) if key in self.answers else (NOT_SUPPORTED, 0.0)
                for key in requests]

    def close(self) -> None:
        pass


def test_without_nvml_the_reason_is_given_and_nothing_crashes():
    reason = nvml_unavailable_reason()
    if reason is None:
        pytest.skip("NVML is available on this machine")
    assert reason.startswith("NVML not available (")


# --- scheduling: PCIe every Nth sample, the wait, no sample in stop() -------------------------------------------

def test_pcie_is_read_only_every_nth_sample():
    assert pcie_every_for(0.05) == 10 and pcie_every_for(0.5) == 1 and pcie_every_for(2.0) == 1
    reader = RecordedReader()
    sampler = GpuSampler(reader, 0.05)
    assert sampler.pcie_every == 10
    samples = [sampler.sample(index) for index in range(25)]
    assert reader.pcie_calls == 3 and reader.gauge_calls == 25
    assert [index for index, s in enumerate(samples) if s.pcie_tx_kibps is not None] == [0, 10, 20]
    assert samples[10].pcie_rx_kibps == 3_400.0 and samples[11].pcie_rx_kibps is None
    assert GpuSampler(RecordedReader(), 0.05, pcie_every=3).pcie_every == 3  # configurable


def test_the_loop_waits_the_interval_minus_the_sample_time():
    assert wait_after(0.05, 0.02) == pytest.approx(0.03)
    assert wait_after(0.05, 0.07) == 0.0  # a slow sample: the next one starts at once, never a negative wait


def test_achieved_interval_comes_from_the_samples_not_the_setting():
    samples = [GpuSample(t_s=1.0), GpuSample(t_s=1.02, mark=MARK_START), GpuSample(t_s=1.09),
               GpuSample(t_s=1.15, mark=MARK_END), GpuSample(t_s=1.18)]
    assert achieved_interval_s(samples) == pytest.approx(0.09)  # (1.18 − 1.0) / 2; marks are no samples
    assert summarize(samples)["gpu_sample_interval_s_mean"] == pytest.approx(0.09)
    assert achieved_interval_s([GpuSample(t_s=1.0)]) is None


def test_sampler_thread_marks_and_stop_take_no_extra_sample():
    reader = RecordedReader({(TX, ALL_LINKS): [100.0, 900.0], (RX, ALL_LINKS): [50.0, 250.0]})
    sampler = GpuSampler(reader, 0.01)
    sampler.start()
    deadline = time.monotonic() + 10
    while reader.gauge_calls < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    sampler.mark_timed_start()
    reader.step = 1
    sampler.mark_timed_end()
    samples = sampler.stop()
    gauge_calls = reader.gauge_calls
    time.sleep(0.05)
    assert reader.gauge_calls == gauge_calls  # the thread has ended
    # every gauge read happened on the sampler thread: stop() itself samples nothing
    assert set(reader.gauge_threads) == {"commbench-nvml"}
    assert [s.t_s for s in samples] == sorted(s.t_s for s in samples)
    marks = [s for s in samples if s.mark]
    assert [s.mark for s in marks] == [MARK_START, MARK_END]
    assert (marks[0].nvlink_tx_kib, marks[1].nvlink_tx_kib) == (100.0, 900.0)
    assert len(samples) - len(marks) == gauge_calls
    span = marks[1].t_s - marks[0].t_s
    assert summarize(samples)["nvlink_tx_gbps_mean"] == pytest.approx(800 * 1024 / span / 1e9)


@pytest.mark.parametrize(("timing", "timed_calls"), [(PER_ITERATION, 6), (BATCH, 6 * 2)])
def test_timed_start_hook_runs_between_warm_up_and_the_timed_loop(tmp_path, timing, timed_calls):
    """The hook measure_point gives the sampler's mark_timed_start: after every warm-up call, before any timed one,
    in both timing modes (a one-rank gloo group in this process: measure() combines samples over ranks)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ctx = RankContext(rank=0, world=1, local_rank=0, local_world=1, backend="gloo", platform=CpuPlatform("gloo"))
        events: list[str] = []
        measure(lambda: events.append("call"), ctx=ctx, warmup=3, iters=6, timing=timing, batch_calls=2,
                on_timed_start=lambda: events.append("mark"))
        assert events == ["call"] * 3 + ["mark"] + ["call"] * timed_calls
    finally:
        dist.destroy_process_group()


# --- NVLink counters: the timed loop's marks, the per-link fallback ----------------------------------------------

def test_nvlink_rate_and_energy_come_from_the_timed_loop_marks_not_warm_up():
    samples = [  # warm-up moves 10 GiB in 0.1 s; the timed loop 1 GiB in 1 s between its marks
        GpuSample(t_s=0.0, power_mw=100_000, energy_mj=1_000_000, nvlink_tx_kib=0, nvlink_rx_kib=0),
        GpuSample(t_s=0.1, mark=MARK_START, energy_mj=1_010_000, nvlink_tx_kib=10 * MiB, nvlink_rx_kib=5 * MiB),
        GpuSample(t_s=0.6, power_mw=300_000, energy_mj=1_200_000, nvlink_tx_kib=10.5 * MiB, nvlink_rx_kib=5 * MiB),
        GpuSample(t_s=1.1, mark=MARK_END, energy_mj=1_410_000, nvlink_tx_kib=11 * MiB, nvlink_rx_kib=5.5 * MiB),
        GpuSample(t_s=1.2, power_mw=200_000, energy_mj=1_430_000, nvlink_tx_kib=11 * MiB, nvlink_rx_kib=5.5 * MiB),
    ]
    summary = summarize(samples)
    assert summary["nvlink_tx_gbps_mean"] == pytest.approx(MiB * 1024 / 1.0 / 1e9)  # 1 GiB over 1 s
    assert summary["nvlink_rx_gbps_mean"] == pytest.approx(MiB / 2 * 1024 / 1.0 / 1e9)
    assert summary["energy_j"] == pytest.approx(400.0)  # (1 410 000 − 1 010 000) mJ
    assert summary["power_w_mean"] == pytest.approx(200.0)  # marks carry no power reading
    # marked, but the end mark has no NVLink reading: no rate rather than one over another window
    broken = [s if s.mark != MARK_END else GpuSample(t_s=s.t_s, mark=MARK_END, energy_mj=s.energy_mj)
              for s in samples]
    assert summarize(broken)["nvlink_tx_gbps_mean"] is None and summarize(broken)["energy_j"] is not None


def test_nvlink_all_links_scope_when_the_driver_accepts_it():
    reader = RecordedReader({(TX, ALL_LINKS): [1_000.0, 3_000.0], (RX, ALL_LINKS): [10.0, 30.0],
                             (TX, 0): [7.0, 7.0], (RX, 0): [7.0, 7.0]})
    counters = NvlinkCounters(reader)
    assert counters.read() == (1_000.0, 10.0)
    reader.step = 1
    assert counters.read() == (3_000.0, 30.0)
    assert counters.scopes == [ALL_LINKS]
    assert all(scope == ALL_LINKS for request in reader.field_requests for _, scope in request)


def test_nvlink_falls_back_to_summing_links_where_the_all_links_scope_is_refused():
    # an older driver refuses scope 0xFFFFFFFF; links 0–3 answer, the other 14 of 18 are absent
    per_link_tx = {0: [100.0, 150.0], 1: [200.0, 260.0], 2: [300.0, 370.0], 3: [400.0, 480.0]}
    answers = {(TX, link): values for link, values in per_link_tx.items()}
    answers |= {(RX, link): [value / 10 for value in values] for link, values in per_link_tx.items()}
    reader = RecordedReader(answers)
    counters = NvlinkCounters(reader)
    assert counters.read() == (pytest.approx(1_000.0), pytest.approx(100.0))
    assert counters.scopes == [0, 1, 2, 3]
    reader.step = 1
    assert counters.read() == (pytest.approx(1_260.0), pytest.approx(126.0))
    assert sum(scope == ALL_LINKS for request in reader.field_requests for _, scope in request) == 2  # once probed
    # a summed link that stops answering empties the read instead of dropping its share
    del reader.answers[(TX, 2)]
    assert counters.read() == (None, None)


def test_nvlink_empty_when_no_link_answers():
    reader = RecordedReader()
    counters = NvlinkCounters(reader)
    assert counters.read() == (None, None) and counters.scopes == []


# --- summary and combining ranks ---------------------------------------------------------------------------------

RECORDED = [  # 3 samples 0.5 s apart, no marks: cumulative counters rise, gauges vary
    GpuSample(t_s=10.0, mem_used_bytes=1_000, util_pct=50.0, power_mw=100_000, energy_mj=5_000_000,
              nvlink_tx_kib=1_000_000, nvlink_rx_kib=2_000_000),
    GpuSample(t_s=10.5, mem_used_bytes=3_000, util_pct=100.0, power_mw=300_000, energy_mj=5_100_000,
              nvlink_tx_kib=1_500_000, nvlink_rx_kib=2_000_000),
    GpuSample(t_s=11.0, mem_used_bytes=2_000, util_pct=0.0, power_mw=200_000, energy_mj=5_200_000,
              nvlink_tx_kib=2_000_000, nvlink_rx_kib=2_250_000),
]


def test_summary_of_recorded_samples_without_marks():
    summary = summarize(RECORDED)
    assert summary["gpu_mem_used_peak_bytes"] == 3_000
    assert summary["gpu_util_pct_mean"] == pytest.approx(50.0)
    assert summary["power_w_mean"] == pytest.approx(200.0)
    assert summary["energy_j"] == pytest.approx(200.0)  # 5.2e6 − 5.0e6 mJ
    assert summary["nvlink_tx_gbps_mean"] == pytest.approx(1_000_000 * 1024 / 1.0 / 1e9)  # KiB diff over 1 s
    assert summary["nvlink_rx_gbps_mean"] == pytest.approx(250_000 * 1024 / 1.0 / 1e9)
    assert summary["gpu_sample_interval_s_mean"] == pytest.approx(0.5)


def test_missing_metrics_stay_empty():
    summary = summarize([GpuSample(t_s=1.0, mem_used_bytes=5), GpuSample(t_s=2.0)])
    assert summary["gpu_mem_used_peak_bytes"] == 5
    assert summary["power_w_mean"] is None and summary["energy_j"] is None and summary["nvlink_tx_gbps_mean"] is None


def test_combining_ranks_without_uuids_counts_each_rank_as_a_gpu():
    combined = combine_ranks([summarize(RECORDED), summarize(RECORDED[:2]), {}])
    assert combined["gpu_mem_used_peak_bytes"] == 3_000
    assert combined["power_w_mean"] == pytest.approx(200.0 + 200.0)  # the job's draw: GPUs add up
    assert combined["energy_j"] == pytest.approx(200.0 + 100.0)
    assert combine_ranks([{}])["gpu_util_pct_mean"] is None


def _rank(uuid, power_w, energy_j, mem, alloc):
    return {"gpu_uuid": uuid, "power_w_mean": power_w, "energy_j": energy_j, "gpu_mem_used_peak_bytes": mem,
            "gpu_mem_alloc_peak_bytes": alloc, "gpu_util_pct_mean": 50.0}


def test_two_ranks_on_one_gpu_count_its_power_and_energy_once():
    combined = combine_ranks([_rank("GPU-a", 300.0, 30.0, 9_000, 1_000), _rank("GPU-a", 310.0, 32.0, 9_100, 1_200)])
    assert combined["power_w_mean"] == pytest.approx(305.0)  # one GPU: the two readings of it averaged, not added
    assert combined["energy_j"] == pytest.approx(31.0)
    assert combined["gpu_mem_used_peak_bytes"] == 9_100
    assert combined["gpu_mem_alloc_peak_bytes"] == 1_200  # the largest rank's allocator


def test_two_gpus_add_up_and_shared_gpus_count_once_each():
    two_gpus = combine_ranks([_rank("GPU-a", 300.0, 30.0, 9_000, 1_000), _rank("GPU-b", 200.0, 20.0, 8_000, 900)])
    assert two_gpus["power_w_mean"] == pytest.approx(500.0) and two_gpus["energy_j"] == pytest.approx(50.0)
    four_ranks = combine_ranks([_rank("GPU-a", 300.0, 30.0, 1, 1), _rank("GPU-b", 200.0, 20.0, 1, 1),
                                _rank("GPU-a", 300.0, 30.0, 1, 1), _rank("GPU-b", 200.0, 20.0, 1, 1)])
    assert four_ranks["power_w_mean"] == pytest.approx(500.0) and four_ranks["energy_j"] == pytest.approx(50.0)


def test_rank_summary_carries_uuid_and_allocator_peak_even_without_samples():
    assert rank_summary([], uuid="GPU-a", alloc_peak_bytes=123) == {"gpu_uuid": "GPU-a",
                                                                    "gpu_mem_alloc_peak_bytes": 123}
    assert rank_summary(RECORDED, uuid=None)["power_w_mean"] == pytest.approx(200.0)


def test_ranks_sharing_a_gpu_are_counted_by_uuid():
    uuids = ["GPU-a", "GPU-a", "GPU-b", "GPU-a"]
    assert [ranks_sharing_gpu(uuids, rank) for rank in range(4)] == [3, 3, 1, 3]
    assert ranks_sharing_gpu([None, None], 0) == 1  # unknown: the rank has its GPU to itself


# --- the per-point memory window ---------------------------------------------------------------------------------

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux features")
def test_peak_window_releases_garbage_before_resetting_the_peak():
    """start_peak_window() is what measure_point calls before each CUDA point (there: gc, empty_cache, then
    reset_peak_memory_stats). The CPU platform shares the order, so it is checked here: memory held only by
    garbage (a reference cycle) must be gone before the peak is reset, else the new window starts at it."""
    platform = CpuPlatform("gloo")
    gc.disable()  # the cycle must survive until start_peak_window collects it
    try:
        platform.reset_peak()
        cycle: list = []
        cycle.append((cycle, torch.ones(64 * MiB)))  # 256 MiB (float32) held by a cycle, touched
        high = platform.peak()["peak_mem_bytes"]
        if high is None:
            pytest.skip("no VmHWM in /proc/self/status")
        del cycle
        platform.start_peak_window()
        assert platform.peak()["peak_mem_bytes"] < high - 150 * MiB
    finally:
        gc.enable()
