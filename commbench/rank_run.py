"""What every rank entry point (collective or training sweep) does around its measurements: record in meta.json how
the run ended, share rank 0's run folder, and open this rank's GPU sampler."""

import contextlib
from pathlib import Path

import torch
import torch.distributed as dist

from commbench import runinfo, store
from commbench.distributed import RankContext
from commbench.profiling.nvml_sampler import GpuSampler, nvml_unavailable_reason


@contextlib.contextmanager
def recorded_end(run_dir: Path | None, *, writes: bool, last: bool = True):
    """meta.json says failed with the first line of the error when the body raises, and complete when it returns
    and was the last part of the run (one launch per point runs the body once per point)."""
    try:
        yield
    except BaseException as error:
        if writes:
            message = str(error).strip().splitlines()
            reason = f"rank 0: {type(error).__name__}: {message[0] if message else ''}"
            store.update_meta(run_dir, status=store.STATUS_FAILED, reason=reason, end_time=runinfo.utc_now())
        raise
    if writes and last:
        store.update_meta(run_dir, status=store.STATUS_COMPLETE, end_time=runinfo.utc_now())


def shared_run_dir(run_dir: Path | None) -> Path:
    """Rank 0's run folder on every rank (ranks other than 0 are not handed it when running in place)."""
    shared = [str(run_dir) if run_dir else None]
    dist.broadcast_object_list(shared, src=0)
    return Path(shared[0])


def gpu_sampler(ctx: RankContext, interval_s: float) -> tuple[GpuSampler | None, str]:
    """This rank's NVML sampler, and what meta.json says about GPU sampling."""
    if ctx.device.type != "cuda":
        return None, "not sampled: the sweep runs on CPU tensors"
    reason = nvml_unavailable_reason()
    if reason:
        return None, f"not sampled: {reason}"
    uuid = getattr(torch.cuda.get_device_properties(ctx.device), "uuid", None)
    uuid_text = None if uuid is None else (str(uuid) if str(uuid).startswith("GPU-") else f"GPU-{uuid}")
    try:
        sampler = GpuSampler(ctx.device.index, interval_s, uuid=uuid_text)
    except Exception as error:  # e.g. the UUID is unknown to NVML: sampling another GPU would be wrong
        return None, f"not sampled: NVML could not open this rank's GPU ({type(error).__name__})"
    return sampler, f"NVML every {interval_s:g} s"
