"""A background thread that samples one GPU through NVML while a point runs, counter reads at the start and end of
the timed loop, and the summary of both.

The NVML calls live in NvmlReader; everything else (which sample reads PCIe, how long the loop waits, the NVLink
per-link fallback, the summary, combining ranks per GPU) takes a reader or recorded samples, so it is tested on CPU.
"""

import threading
import time
from dataclasses import asdict, dataclass
from typing import Literal, Protocol, TypedDict

from commbench.nvml import supported
from commbench.schema import gpu

SAMPLE_FIELDS = list(gpu.SAMPLE_FIELDS)
"""A sample's fields (gpu_samples.csv), declared in commbench/schema/gpu.py."""

Mark = Literal["timed_start", "timed_end"]
"""A counter read at the timed loop's start or end (a GpuSample's mark; None marks a plain sample)."""
MARK_START: Mark = "timed_start"
MARK_END: Mark = "timed_end"
ALL_LINKS = 0xFFFFFFFF  # NVML field scope that sums every link; a bare field id would read link 0 only
NVLINK_FIELDS = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")  # KiB, cumulative
PCIE_PERIOD_S = 0.5
"""PCIe throughput is read about this often. nvmlDeviceGetPcieThroughput blocks ~20 ms per call (it measures over a
20 ms window) and a sample needs two (TX, RX): ~40 ms, most of the default 50 ms interval. Once per 0.5 s (every
10th sample at 0.05 s) keeps it under a tenth of the sampler's time, so the other metrics keep their interval."""


def pcie_every_for(interval_s: float) -> int:
    """Every how many samples PCIe is read at this interval (1 at 0.5 s and above)."""
    return max(1, round(PCIE_PERIOD_S / interval_s))


@dataclass(frozen=True)
class GpuSample:
    t_s: float  # monotonic seconds
    mark: Mark | None = None  # MARK_START / MARK_END: a counter read at the timed loop's start or end; None: a sample
    mem_used_bytes: int | None = None
    util_pct: float | None = None
    power_mw: float | None = None
    energy_mj: float | None = None  # cumulative since driver load
    sm_clock_mhz: float | None = None
    nvlink_tx_kib: float | None = None  # cumulative over all links
    nvlink_rx_kib: float | None = None
    pcie_tx_kibps: float | None = None  # read on every pcie_every-th sample only
    pcie_rx_kibps: float | None = None


def nvml_unavailable_reason() -> str | None:
    """None when NVML answers on this machine, else why not (the reason meta.json records)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return None
    except Exception as error:  # NVMLError_LibraryNotFound without a driver, ImportError without the package
        return f"NVML not available ({type(error).__name__})"


class Gauges(TypedDict):
    """The cheap reads of one sample (NvmlReader.gauges); None where the GPU or driver does not report one."""

    mem_used_bytes: int | None
    util_pct: float | None
    power_mw: float | None
    energy_mj: float | None
    sm_clock_mhz: float | None


class GpuReader(Protocol):
    """What the sampler reads of one GPU: NvmlReader, or a test's stand-in."""

    @property
    def links(self) -> int: ...

    def gauges(self) -> Gauges: ...

    def energy_mj(self) -> float | None: ...

    def pcie_kibps(self) -> tuple[float | None, float | None]: ...

    def field_values(self, requests: list[tuple[int, int]]) -> list[tuple[int, float]] | None: ...

    def close(self) -> None: ...


class NvmlReader:
    """The NVML calls for one GPU; a metric the GPU or driver does not report reads None."""

    def __init__(self, index: int, *, uuid: str | None = None):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        # NVML numbers GPUs physically, torch after CUDA_VISIBLE_DEVICES: the UUID names the same GPU in both
        self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index)
        self.nvlink_field_ids = tuple(getattr(pynvml, name) for name in NVLINK_FIELDS) \
            if all(hasattr(pynvml, name) for name in NVLINK_FIELDS) else ()
        self.links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)

    def gauges(self) -> Gauges:
        """The cheap reads: memory used, utilisation, power, energy counter, SM clock."""
        nvml, handle = self._nvml, self._handle
        memory = supported(nvml.nvmlDeviceGetMemoryInfo, handle)
        util = supported(nvml.nvmlDeviceGetUtilizationRates, handle)
        return {"mem_used_bytes": int(memory.used) if memory else None,
                "util_pct": float(util.gpu) if util else None,
                "power_mw": supported(nvml.nvmlDeviceGetPowerUsage, handle),
                "energy_mj": self.energy_mj(),
                "sm_clock_mhz": supported(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)}

    def energy_mj(self) -> float | None:
        return supported(self._nvml.nvmlDeviceGetTotalEnergyConsumption, self._handle)

    def pcie_kibps(self) -> tuple[float | None, float | None]:
        """TX and RX; each call blocks ~20 ms."""
        nvml, handle = self._nvml, self._handle
        return (supported(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
                supported(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES))

    def field_values(self, requests: list[tuple[int, int]]) -> list[tuple[int, float]] | None:
        """(nvmlReturn, value) per (field id, scope id); None when the call itself fails."""
        values = supported(self._nvml.nvmlDeviceGetFieldValues, self._handle, requests)
        return None if values is None else [(value.nvmlReturn, float(value.value.ullVal)) for value in values]

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class NvlinkCounters:
    """Cumulative NVLink data TX and RX of one GPU in KiB, summed over its links: NVML's all-links scope where the
    driver accepts it; where it is refused (nvmlReturn != 0), each link's counter (scope = link index), summed over
    the links that answered the first time (a link that stops answering later makes the read empty, not smaller)."""

    def __init__(self, reader: GpuReader) -> None:
        self._reader = reader
        self._fields = tuple(getattr(reader, "nvlink_field_ids", ()))
        self._lock = threading.Lock()
        self._scopes: list[int] | None = None  # what is summed: [ALL_LINKS], the answering links, or nothing

    @property
    def scopes(self) -> list[int] | None:
        """The scope ids read and summed ([ALL_LINKS] or link indices); None before the first read."""
        return self._scopes

    def read(self) -> tuple[float | None, float | None]:
        if len(self._fields) != 2:
            return None, None
        with self._lock:  # the sampler thread and the timed-loop marks both read
            if self._scopes is None:
                self._scopes = self._choose()
        return self._sum(self._scopes) if self._scopes else (None, None)

    def _choose(self) -> list[int]:
        aggregate = self._reader.field_values([(field, ALL_LINKS) for field in self._fields])
        if aggregate is not None and all(status == 0 for status, _ in aggregate):
            return [ALL_LINKS]
        links = range(self._reader.links)
        per_link = self._reader.field_values([(field, link) for link in links for field in self._fields]) or []
        return [link for link in links
                if len(per_link) > 2 * link + 1 and per_link[2 * link][0] == 0 and per_link[2 * link + 1][0] == 0]

    def _sum(self, scopes: list[int]) -> tuple[float | None, float | None]:
        values = self._reader.field_values([(field, scope) for scope in scopes for field in self._fields])
        if values is None or len(values) != 2 * len(scopes) or any(status != 0 for status, _ in values):
            return None, None
        return sum(value for _, value in values[0::2]), sum(value for _, value in values[1::2])


def wait_after(interval_s: float, took_s: float) -> float:
    """Seconds to wait after a sample that took took_s, so that samples start interval_s apart (none when the
    sample took longer)."""
    return max(0.0, interval_s - took_s)


class GpuSampler:
    """Samples one GPU every `interval_s` seconds from start() to stop() in a daemon thread (NVML calls release the
    GIL), PCIe only every `pcie_every`-th sample; mark_timed_start()/mark_timed_end() read the counters (NVLink,
    energy) on the calling thread exactly where the timed loop starts and ends."""

    def __init__(self, reader: GpuReader, interval_s: float, *, pcie_every: int | None = None) -> None:
        self._reader = reader
        self.interval_s = interval_s
        self.pcie_every = pcie_every or pcie_every_for(interval_s)
        self._nvlink = NvlinkCounters(reader)
        self._samples: list[GpuSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls, index: int, interval_s: float, *, uuid: str | None = None) -> "GpuSampler":
        return cls(NvmlReader(index, uuid=uuid), interval_s)

    def describe(self) -> str:
        return f"NVML every {self.interval_s:g} s, PCIe every {self.pcie_every} samples, NVLink and energy " \
               "counters read at the timed loop's start and end"

    def sample(self, index: int) -> GpuSample:
        """Sample number `index` of a point (PCIe on every pcie_every-th, starting with the first)."""
        t_s = time.monotonic()
        gauges = self._reader.gauges()
        tx, rx = self._nvlink.read()
        pcie_tx = pcie_rx = None
        if index % self.pcie_every == 0:
            pcie_tx, pcie_rx = self._reader.pcie_kibps()
        return GpuSample(t_s=t_s, **gauges, nvlink_tx_kib=tx, nvlink_rx_kib=rx, pcie_tx_kibps=pcie_tx,
                         pcie_rx_kibps=pcie_rx)

    def _mark(self, mark: Mark) -> None:
        before = time.monotonic()
        tx, rx = self._nvlink.read()
        energy = self._reader.energy_mj()
        self._samples.append(GpuSample(t_s=(before + time.monotonic()) / 2, mark=mark, energy_mj=energy,
                                       nvlink_tx_kib=tx, nvlink_rx_kib=rx))

    def mark_timed_start(self) -> None:
        """Call when the timed loop starts (after warm-up, the device idle)."""
        self._mark(MARK_START)

    def mark_timed_end(self) -> None:
        """Call when the timed loop has ended (the device idle)."""
        self._mark(MARK_END)

    def _loop(self) -> None:
        index = 0
        while not self._stop.is_set():
            began = time.monotonic()
            self._samples.append(self.sample(index))
            index += 1
            self._stop.wait(wait_after(self.interval_s, time.monotonic() - began))

    def start(self) -> None:
        self._samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._loop, name="commbench-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> list[GpuSample]:
        """The point's samples and marks in time order (no extra sample: the end mark closes the counters)."""
        self._stop.set()
        assert self._thread is not None  # stop() follows start(), which made the thread
        self._thread.join()
        return sorted(self._samples, key=lambda sample: sample.t_s)

    def close(self) -> None:
        self._reader.close()


def _values(samples: list[GpuSample], field: str) -> list[float]:
    return [getattr(sample, field) for sample in samples if getattr(sample, field) is not None]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counter_points(samples: list[GpuSample], field: str) -> list[tuple[float, float]]:
    """(time, value) of a cumulative counter: the timed loop's start and end marks when both were read, else the
    first and last sample that has it."""
    marks = {sample.mark: sample for sample in samples if sample.mark and getattr(sample, field) is not None}
    if MARK_START in marks and MARK_END in marks:
        return [(marks[name].t_s, getattr(marks[name], field)) for name in (MARK_START, MARK_END)]
    if any(sample.mark for sample in samples):  # marked, but this counter was not read at both: no honest window
        return []
    points = [(sample.t_s, getattr(sample, field)) for sample in samples if getattr(sample, field) is not None]
    return [points[0], points[-1]] if len(points) >= 2 else []


def _counter_rate_gbps(samples: list[GpuSample], field: str) -> float | None:
    """Mean rate of a cumulative KiB counter over the timed loop, in GB/s (1e9 B/s)."""
    points = _counter_points(samples, field)
    if len(points) < 2 or points[1][0] <= points[0][0]:
        return None
    return (points[1][1] - points[0][1]) * 1024 / (points[1][0] - points[0][0]) / 1e9


def achieved_interval_s(samples: list[GpuSample]) -> float | None:
    """Mean time between consecutive samples (marks excluded): what the loop achieved, not what was asked."""
    times = [sample.t_s for sample in samples if sample.mark is None]
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) >= 2 else None


def summarize(samples: list[GpuSample]) -> dict:
    """One GPU's columns (SUMMARY_COLUMNS) for one point: gauges over every sample, counters (energy, NVLink) over
    the timed loop (its start and end marks)."""
    gauges = [sample for sample in samples if sample.mark is None]
    memory, power = _values(gauges, "mem_used_bytes"), _values(gauges, "power_mw")
    energy = _counter_points(samples, "energy_mj")
    return {
        "gpu_mem_used_peak_bytes": max(memory) if memory else None,
        "gpu_util_pct_mean": _mean(_values(gauges, "util_pct")),
        "power_w_mean": _mean([value / 1000 for value in power]) if power else None,
        "energy_j": (energy[1][1] - energy[0][1]) / 1000 if energy else None,
        "nvlink_tx_gbps_mean": _counter_rate_gbps(samples, "nvlink_tx_kib"),
        "nvlink_rx_gbps_mean": _counter_rate_gbps(samples, "nvlink_rx_kib"),
        "gpu_sample_interval_s_mean": achieved_interval_s(samples),
    }


def _largest(values: list[float]) -> float | None:
    return max(values) if values else None


def _total(values: list[float]) -> float | None:
    return sum(values) if values else None


# A row's GPU columns, each with how ranks sharing one GPU give that GPU's value (they read the same device) and how
# the job's value comes from the GPUs' values: peak memory is the largest, utilisation and NVLink rates the mean over
# GPUs, power and energy the sum over GPUs (what the job drew), the sampling interval the longest.
# gpu_mem_alloc_peak_bytes is the torch allocator's peak of each rank (per process, not per device): the largest rank.
_COMBINE = {"gpu_mem_used_peak_bytes": (_largest, _largest), "gpu_mem_alloc_peak_bytes": (_largest, _largest),
            "gpu_util_pct_mean": (_mean, _mean), "power_w_mean": (_mean, _total), "energy_j": (_mean, _total),
            "nvlink_tx_gbps_mean": (_mean, _mean), "nvlink_rx_gbps_mean": (_mean, _mean),
            "gpu_sample_interval_s_mean": (_largest, _largest)}
SUMMARY_COLUMNS = list(gpu.SUMMARY_COLUMNS)
"""A row's GPU columns (commbench/schema/gpu.py), in file order; _COMBINE says how each is combined."""
UUID_KEY = "gpu_uuid"
"""Each rank's summary names its GPU under this key; ranks with the same UUID share one GPU (gloo on CUDA)."""


def combine_ranks(summaries: list[dict]) -> dict:
    """One row's GPU columns for the whole job from each rank's summary (summarize() plus UUID_KEY and the allocator
    peak): per GPU first (ranks with the same UUID count once), then over GPUs. A rank without a UUID is its own GPU.
    """
    gpus: dict[object, list[dict]] = {}
    for rank, summary in enumerate(summaries):
        gpus.setdefault(summary.get(UUID_KEY) or ("rank", rank), []).append(summary)
    combined = {}
    for column, (per_gpu, over_gpus) in _COMBINE.items():
        values = [per_gpu([rank[column] for rank in ranks if rank.get(column) is not None]) for ranks in gpus.values()]
        combined[column] = over_gpus([value for value in values if value is not None])
    return combined


def rank_summary(samples: list[GpuSample], *, uuid: str | None, alloc_peak_bytes: int | None = None) -> dict:
    """What a rank contributes to combine_ranks: its samples' summary (empty without samples), its GPU's UUID and
    its allocator's peak."""
    return {**(summarize(samples) if samples else {}), UUID_KEY: uuid, "gpu_mem_alloc_peak_bytes": alloc_peak_bytes}


def ranks_sharing_gpu(uuids: list[str | None], rank: int) -> int:
    """How many ranks use rank `rank`'s GPU, from every rank's GPU UUID (1 when the UUID is unknown)."""
    mine = uuids[rank]
    return 1 if mine is None else sum(uuid == mine for uuid in uuids)


def sample_rows(samples: list[GpuSample]) -> list[dict]:
    return [asdict(sample) for sample in samples]

