"""torch.profiler capture of a few extra iterations of a point, after it was timed and checked."""

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from torch.profiler import ProfilerActivity, profile, schedule

TRACES_DIR = "traces"


class ProfiledPlatform(Protocol):
    """What capture needs of commbench/platform.py's platforms (which import this package: named here, not
    imported)."""

    def profiler_activities(self) -> list[ProfilerActivity]: ...

    def synchronize(self) -> None: ...


def trace_file_name(*, rank: int, collective: str, impl: str, dtype: str, op: str, inplace: bool,
                    size_bytes: int) -> str:
    placement = "inplace" if inplace else "outofplace"
    return f"rank{rank}-{collective}-{impl}-{dtype}-{op}-{placement}-{size_bytes}B.json.gz"


def capture(run: Callable[[], object], *, barrier: Callable[[], None], iterations: int, platform: ProfiledPlatform,
            path: Path, record_shapes: bool = False) -> Path:
    """Profile `iterations` ProfilerSteps of run() (one more, untraced, warms the profiler up) into a gzipped
    Chrome/Kineto trace that Perfetto opens. Not timed: the point's numbers come from the timed loop. One barrier
    lines the ranks up before the profiler starts; inside, only run() runs, so the trace shows it alone.
    record_shapes keeps operator input shapes (what profiling/comm_calls.py reads message sizes from)."""
    activities = platform.profiler_activities()
    path.parent.mkdir(parents=True, exist_ok=True)
    barrier()
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=iterations),
                 record_shapes=record_shapes,
                 on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as profiler:
        for _ in range(iterations + 1):
            run()
            platform.synchronize()
            profiler.step()
    return path
