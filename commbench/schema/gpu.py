"""The GPU columns of a GPU run (NVML, commbench/profiling/nvml_sampler.py): a row's summary over the ranks' GPUs,
and the per-sample fields of gpu_samples.csv."""

from commbench.schema.column import Column

GPU_MEM_USED_PEAK_BYTES = Column("gpu_mem_used_peak_bytes", "int", "Peak device memory in use while the point ran "
                                 "(NVML, the largest GPU).", unit="bytes")
GPU_MEM_ALLOC_PEAK_BYTES = Column("gpu_mem_alloc_peak_bytes", "int", "Peak memory the torch allocator held (the "
                                  "largest rank).", unit="bytes")
GPU_UTIL_PCT_MEAN = Column("gpu_util_pct_mean", "float", "GPU utilisation, mean over samples and GPUs.", unit="%")
POWER_W_MEAN = Column("power_w_mean", "float", "Power drawn, mean over samples, summed over GPUs.", unit="W")
ENERGY_J = Column("energy_j", "float", "Energy over the timed loop, summed over GPUs.", unit="J")
NVLINK_TX_GBPS_MEAN = Column("nvlink_tx_gbps_mean", "float", "NVLink transmit rate over the timed loop, mean over "
                             "GPUs.", unit="GB/s")
NVLINK_RX_GBPS_MEAN = Column("nvlink_rx_gbps_mean", "float", "NVLink receive rate over the timed loop, mean over "
                             "GPUs.", unit="GB/s")
GPU_SAMPLE_INTERVAL_S_MEAN = Column("gpu_sample_interval_s_mean", "float", "Achieved interval between NVML samples "
                                    "(the longest GPU's).", unit="s")
SUMMARY_COLUMNS = (GPU_MEM_USED_PEAK_BYTES, GPU_MEM_ALLOC_PEAK_BYTES, GPU_UTIL_PCT_MEAN, POWER_W_MEAN, ENERGY_J,
                   NVLINK_TX_GBPS_MEAN, NVLINK_RX_GBPS_MEAN, GPU_SAMPLE_INTERVAL_S_MEAN)
"""A row's GPU columns, in file order."""

T_S = Column("t_s", "float", "Seconds since the sampler started.", unit="s")
MARK = Column("mark", "str", "timed_start or timed_end at the timed loop's edges; empty for a gauge sample.")
MEM_USED_BYTES = Column("mem_used_bytes", "int", "Device memory in use.", unit="bytes")
UTIL_PCT = Column("util_pct", "float", "GPU utilisation.", unit="%")
POWER_MW = Column("power_mw", "float", "Power drawn.", unit="mW")
ENERGY_MJ = Column("energy_mj", "float", "Energy counter since the driver loaded.", unit="mJ")
SM_CLOCK_MHZ = Column("sm_clock_mhz", "float", "SM clock.", unit="MHz")
NVLINK_TX_KIB = Column("nvlink_tx_kib", "float", "NVLink bytes sent, cumulative (every link).", unit="KiB")
NVLINK_RX_KIB = Column("nvlink_rx_kib", "float", "NVLink bytes received, cumulative (every link).", unit="KiB")
PCIE_TX_KIBPS = Column("pcie_tx_kibps", "float", "PCIe transmit rate.", unit="KiB/s")
PCIE_RX_KIBPS = Column("pcie_rx_kibps", "float", "PCIe receive rate.", unit="KiB/s")
SAMPLE_FIELDS = (T_S, MARK, MEM_USED_BYTES, UTIL_PCT, POWER_MW, ENERGY_MJ, SM_CLOCK_MHZ, NVLINK_TX_KIB, NVLINK_RX_KIB,
                 PCIE_TX_KIBPS, PCIE_RX_KIBPS)
"""One NVML sample's fields (gpu_samples.csv, after the row's keys), in file order."""
