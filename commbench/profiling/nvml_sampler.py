"""A background thread that samples one GPU through NVML while a point runs, and the summary of its samples."""

import threading
import time
from dataclasses import asdict, dataclass

SAMPLE_FIELDS = ["t_s", "mem_used_bytes", "util_pct", "power_mw", "energy_mj", "sm_clock_mhz", "nvlink_tx_kib",
                 "nvlink_rx_kib", "pcie_tx_kibps", "pcie_rx_kibps"]


@dataclass(frozen=True)
class GpuSample:
    t_s: float  # monotonic seconds
    mem_used_bytes: int | None = None
    util_pct: float | None = None
    power_mw: float | None = None
    energy_mj: float | None = None  # cumulative since driver load
    sm_clock_mhz: float | None = None
    nvlink_tx_kib: float | None = None  # cumulative over all links
    nvlink_rx_kib: float | None = None
    pcie_tx_kibps: float | None = None
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


def _call(function, *args):
    try:
        return function(*args)
    except Exception:  # a metric this GPU or driver does not support stays empty
        return None


class GpuSampler:
    """Samples GPU `index` every `interval_s` seconds from start() to stop(); NVML calls release the GIL."""

    def __init__(self, index: int, interval_s: float, *, uuid: str | None = None):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        # NVML numbers GPUs physically, torch after CUDA_VISIBLE_DEVICES: the UUID names the same GPU in both
        self._handle = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index)
        self._interval_s = interval_s
        self._samples: list[GpuSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        fields = ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")
        # scope UINT_MAX sums all links; a bare field id would read link 0 only
        self._nvlink_fields = [(getattr(pynvml, name), 0xFFFFFFFF) for name in fields if hasattr(pynvml, name)]

    def sample(self) -> GpuSample:
        nvml, handle = self._nvml, self._handle
        memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
        util = _call(nvml.nvmlDeviceGetUtilizationRates, handle)
        tx = rx = None
        if len(self._nvlink_fields) == 2:
            values = _call(nvml.nvmlDeviceGetFieldValues, handle, self._nvlink_fields)
            if values and all(value.nvmlReturn == 0 for value in values):
                tx, rx = (float(value.value.ullVal) for value in values)
        return GpuSample(
            t_s=time.monotonic(),
            mem_used_bytes=int(memory.used) if memory else None,
            util_pct=float(util.gpu) if util else None,
            power_mw=_call(nvml.nvmlDeviceGetPowerUsage, handle),
            energy_mj=_call(nvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            sm_clock_mhz=_call(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            nvlink_tx_kib=tx,
            nvlink_rx_kib=rx,
            pcie_tx_kibps=_call(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES),
            pcie_rx_kibps=_call(nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES),
        )

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._samples.append(self.sample())
            self._stop.wait(self._interval_s)

    def start(self) -> None:
        self._samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._loop, name="commbench-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> list[GpuSample]:
        self._stop.set()
        self._thread.join()
        self._samples.append(self.sample())  # a last sample closes the counters' difference
        return self._samples

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _values(samples: list[GpuSample], field: str) -> list[float]:
    return [getattr(sample, field) for sample in samples if getattr(sample, field) is not None]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _counter_rate_gbps(samples: list[GpuSample], field: str) -> float | None:
    """Mean rate of a cumulative KiB counter between the first and last sample, in GB/s (1e9 B/s)."""
    points = [(sample.t_s, getattr(sample, field)) for sample in samples if getattr(sample, field) is not None]
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    return (points[-1][1] - points[0][1]) * 1024 / (points[-1][0] - points[0][0]) / 1e9


def summarize(samples: list[GpuSample]) -> dict:
    """The results.csv columns (SUMMARY_COLUMNS) for one point on one GPU."""
    memory, power = _values(samples, "mem_used_bytes"), _values(samples, "power_mw")
    energy = [(s.t_s, s.energy_mj) for s in samples if s.energy_mj is not None]
    energy_j = (energy[-1][1] - energy[0][1]) / 1000 if len(energy) >= 2 else None
    return {
        "gpu_mem_used_peak_bytes": max(memory) if memory else None,
        "gpu_util_pct_mean": _mean(_values(samples, "util_pct")),
        "power_w_mean": _mean([value / 1000 for value in power]) if power else None,
        "energy_j": energy_j,
        "nvlink_tx_gbps_mean": _counter_rate_gbps(samples, "nvlink_tx_kib"),
        "nvlink_rx_gbps_mean": _counter_rate_gbps(samples, "nvlink_rx_kib"),
    }


def _largest(values: list[float]) -> float | None:
    return max(values) if values else None


def _total(values: list[float]) -> float | None:
    return sum(values) if values else None


# A row's GPU columns, each with how the job's value comes from the GPUs' values: peak memory is the largest GPU's,
# utilisation and NVLink rates the mean over GPUs, power and energy the sum (what the job drew).
_COMBINE = {"gpu_mem_used_peak_bytes": _largest, "gpu_util_pct_mean": _mean, "power_w_mean": _total,
            "energy_j": _total, "nvlink_tx_gbps_mean": _mean, "nvlink_rx_gbps_mean": _mean}
SUMMARY_COLUMNS = list(_COMBINE)


def combine_ranks(summaries: list[dict]) -> dict:
    """One row's GPU columns for the whole job from each rank's summarize()."""
    return {column: combine([summary[column] for summary in summaries if summary.get(column) is not None])
            for column, combine in _COMBINE.items()}


def sample_rows(samples: list[GpuSample]) -> list[dict]:
    return [asdict(sample) for sample in samples]
