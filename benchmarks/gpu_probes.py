"""The GPU facts commbench's CUDA paths rest on, measured in one process (benchmarks/gpu_validation.py's first step).

    python benchmarks/gpu_probes.py --out probes.json

- versions: Python, torch, CUDA, NCCL, the driver (NVML), commbench;
- NVML by UUID: each torch device's UUID resolves, through NVML, to a GPU of the same name (commbench matches ranks'
  devices to NVML handles this way);
- NVML field values: the NVLink link count field reads, or says NOT_SUPPORTED where the GPU has no NVLink (then
  commbench's NVLink counters read None, not zero);
- CUDA event resolution: the smallest non-zero gap between back-to-back events queued behind a spin, and their median;
- spin calibration: torch.cuda._sleep(cycles) timed by events at three lengths, a straight line through them, and the
  clock it implies beside NVML's SM clock; then commbench's own spin (commbench.measure.spin_kernel.spin_device,
  which the timers and the test faults use) asked for 1, 5 and 20 ms, within 20 % of each;
- host issue times: an NCCL world-1 all_reduce of 1 MiB issued 21 times, the first (which creates NCCL's connections)
  against the median of the rest;
- the launch queue: behind a 0.5 s spin, world-1 out-of-place all_gathers (each a copy NCCL queues) issued until one
  blocks the host (the stream's queue is full), against the calls per segment the spin plan allows at their issue
  time (commbench/measure/spin_plan.py: the plan must stay below the depth measured here).

Without a GPU it writes the versions and cuda: null, and exits 0. "checks" holds each property that must hold.
"""

import argparse
import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path


def versions() -> dict:
    import torch

    import commbench

    found = {"python": platform.python_version(), "torch": torch.__version__, "cuda_runtime": torch.version.cuda,
             "commbench": getattr(commbench, "__version__", None), "nccl": None, "driver": None}
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    try:
        import pynvml

        pynvml.nvmlInit()
        found["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
    except Exception as error:  # no driver here: say so rather than fail (the CPU path of this probe)
        found["driver"] = f"unavailable: {type(error).__name__}"
    return found


def nvml_by_uuid() -> tuple[list[dict], bool]:
    import pynvml
    import torch

    from commbench.profiling.nvml_sampler import NvlinkCounters, NvmlReader

    pynvml.nvmlInit()
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        uuid = f"GPU-{props.uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        sm_clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        fields = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        counters = NvlinkCounters(NvmlReader(index, uuid=uuid))
        devices.append({"index": index, "uuid": uuid, "torch_name": props.name, "nvml_name": name,
                        "sm_clock_mhz": sm_clock, "nvlink_link_count": int(fields[0].value.uiVal),
                        "nvlink_field_status": int(fields[0].nvmlReturn),
                        "commbench_nvlink_kib": list(counters.read()), "commbench_nvlink_scopes": counters.scopes})
    same = all(device["torch_name"] in device["nvml_name"] or device["nvml_name"] in device["torch_name"]
               for device in devices)
    return devices, bool(devices) and same


NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3


def nvlink_read_or_absent(device: dict) -> bool:
    """NVML answers the NVLink link-count field, and commbench's NVLink counters agree: numbers where links answer,
    None where the GPU has no NVLink to count (NOT_SUPPORTED: a GPU passed into a VM alone, or a PCIe card)."""
    status, tx_rx = device["nvlink_field_status"], device["commbench_nvlink_kib"]
    if status == NVML_ERROR_NOT_SUPPORTED:
        return tx_rx == [None, None]
    return status == NVML_SUCCESS and (device["nvlink_link_count"] == 0 or None not in tx_rx)


def event_resolution() -> dict:
    import torch

    gaps = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # behind a 0.1 ms spin, so both events are queued before the GPU reaches them: their gap is the timer's, not
        # the host's time between the two records (about 10 us in a VM)
        torch.cuda._sleep(200_000)
        start.record()
        end.record()
        end.synchronize()
        gaps.append(start.elapsed_time(end) * 1e3)
    positive = [gap for gap in gaps if gap > 0]
    return {"min_nonzero_us": min(positive) if positive else 0.0, "median_us": statistics.median(gaps)}


def spin_calibration(sm_clock_mhz: float | None) -> dict:
    import torch

    lengths = (100_000, 1_000_000, 10_000_000)
    seconds = []
    torch.cuda._sleep(1000)  # the kernel's first launch loads it
    for cycles in lengths:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    slope, intercept = statistics.linear_regression(lengths, seconds)
    predicted = [intercept + slope * cycles for cycles in lengths]
    mean = statistics.fmean(seconds)
    total = sum((value - mean) ** 2 for value in seconds)
    r2 = 1 - sum((value - guess) ** 2 for value, guess in zip(seconds, predicted)) / total if total else 0.0
    return {"cycles": list(lengths), "seconds": seconds, "implied_clock_mhz": 1e-6 / slope if slope > 0 else None,
            "nvml_sm_clock_mhz": sm_clock_mhz, "r2": r2}


def commbench_spin() -> dict:
    """commbench's own spin (commbench.measure.spin_kernel.spin_device, calibrated once per process) asked for 1, 5 and
    20 ms,
    each timed by CUDA events."""
    import torch

    from commbench.measure.spin_kernel import calibrate_spin, spin_device

    calibrate_spin()
    found = {}
    for wanted_s in (0.001, 0.005, 0.020):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        spin_device(wanted_s)
        end.record()
        end.synchronize()
        found[f"{wanted_s * 1e3:g}_ms"] = start.elapsed_time(end)
    return {"measured_ms": found,
            "worst_ratio": max(abs(measured / float(key.removesuffix("_ms")) - 1) for key, measured in found.items())}


def world_one_nccl() -> None:
    import torch
    import torch.distributed as dist

    with socket.socket() as probe:  # a free port for the one-rank rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))


def host_issue_times() -> dict:
    import torch
    import torch.distributed as dist

    tensor = torch.ones(1 << 18, device="cuda")  # 1 MiB of float32
    output = torch.empty_like(tensor)
    issue = []
    for _ in range(21):
        started = time.perf_counter()
        dist.all_reduce(output.copy_(tensor))
        issue.append(time.perf_counter() - started)
        torch.cuda.synchronize()
    rest = statistics.median(issue[1:])
    return {"first_us": issue[0] * 1e6, "median_rest_us": rest * 1e6, "first_over_rest": issue[0] / rest}


QUEUE_SPIN_S = 0.5
QUEUE_CALLS = 4000
BLOCKED_S = 0.005
"""A call whose issue took this long waited for the device: the queue was full."""


def launch_queue() -> dict:
    """How many calls the stream takes behind a spin before the host blocks, beside what the spin plan allows."""
    import torch
    import torch.distributed as dist

    from commbench.measure.spin_kernel import calibrate_spin, spin_device
    from commbench.measure.spin_plan import queue_bound

    send = torch.ones(2048, device="cuda")
    receive = torch.empty(2048, device="cuda")
    for _ in range(3):  # warm: the first call connects
        dist.all_gather_into_tensor(receive, send)
    torch.cuda.synchronize()
    calibrate_spin()
    spin_device(QUEUE_SPIN_S)
    issue, blocked_at = [], None
    started = time.perf_counter()
    for index in range(QUEUE_CALLS):
        before = time.perf_counter()
        dist.all_gather_into_tensor(receive, send)
        issue.append(time.perf_counter() - before)
        if issue[-1] > BLOCKED_S:
            blocked_at = index
            break
        if time.perf_counter() - started > QUEUE_SPIN_S:  # the spin ended first: no block seen within it
            break
    torch.cuda.synchronize()
    typical = statistics.median(issue[: blocked_at or len(issue)])
    return {"calls_before_block": blocked_at, "calls_issued": len(issue), "typical_issue_us": typical * 1e6,
            "plan_calls_per_segment": queue_bound(typical)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    found: dict = {**versions(), "cuda": None, "checks": {}}
    if torch.cuda.is_available():
        devices, same = nvml_by_uuid()
        events = event_resolution()
        spin = spin_calibration(devices[0]["sm_clock_mhz"] if devices else None)
        own_spin = commbench_spin()
        world_one_nccl()
        try:
            issue, queue = host_issue_times(), launch_queue()
        finally:
            torch.distributed.destroy_process_group()
        found.update(cuda={"devices": devices}, events=events, spin=spin, commbench_spin=own_spin, host_issue=issue,
                     launch_queue=queue)
        found["checks"] = {
            "nvml_by_uuid_names_agree": same,
            "nvlink_read_or_absent": all(nvlink_read_or_absent(device) for device in devices),
            "event_resolution_under_10_us": 0 < events["min_nonzero_us"] < 10,
            "spin_linear_r2_over_0.99": spin["r2"] > 0.99,
            "commbench_spin_within_20_pct": own_spin["worst_ratio"] < 0.2,
            "issue_after_first_under_1_ms": issue["median_rest_us"] < 1000,
            # the plan's segment never fills the queue (no block seen within the spin also holds it)
            "spin_plan_below_the_launch_queue": queue["calls_before_block"] is None
            or queue["plan_calls_per_segment"] < queue["calls_before_block"],
        }
    args.out.write_text(json.dumps(found, indent=2))
    print(json.dumps(found["checks"] or {"cuda": None}))


if __name__ == "__main__":
    main()
