"""A real CPU-quota throttle of one "node"'s processes: a cgroup with a CFS quota that its torchrun launch starts in,
so that the launch and every rank it forks run under the quota. A throttled process runs at full speed until its
quota of the period is spent, then waits for the next period: most exchanges are normal, some stall for tens of
milliseconds, as on a node throttled by its power or thermal limit, or by a container's CPU limit.

cgroup v1 (a `cpu` hierarchy, cpu.cfs_quota_us) or v2 (cpu.max). Needs a writable /sys/fs/cgroup (root, not a
read-only container mount); `unavailable()` says why not where it is not."""

import os
import uuid
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _root() -> tuple[Path, int] | None:
    if (V1 / "cpu.cfs_quota_us").exists():
        return V1, 1
    if "cpu" in (V2 / "cgroup.controllers").read_text().split() if (V2 / "cgroup.controllers").exists() else False:
        return V2, 2
    return None


def unavailable() -> str | None:
    """Why a CPU-quota cgroup cannot be made here, or None when it can."""
    found = _root()
    if found is None:
        return "no cgroup cpu controller under /sys/fs/cgroup (neither v1 cpu.cfs_quota_us nor v2 cpu.max)"
    if not os.access(found[0], os.W_OK):
        return f"{found[0]} is not writable (not root, or a read-only cgroup mount)"
    return None


class CpuQuota:
    """`with CpuQuota(20) as quota:` a cgroup allowed 20 % of one CPU; start a process in it with
    preexec_fn=quota.enter."""

    def __init__(self, percent: float):
        self.percent = percent
        self.path: Path | None = None

    def __enter__(self) -> "CpuQuota":
        root, version = _root()
        self.path = root / f"commbench-test-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        quota = int(PERIOD_US * self.percent / 100)
        if version == 1:
            (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        return self

    def enter(self) -> None:
        """In the child before exec: move this process into the cgroup (its children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def __exit__(self, *exc) -> None:
        try:
            self.path.rmdir()  # the processes have ended by now; a cgroup with none left is removed by rmdir
        except OSError:
            pass
