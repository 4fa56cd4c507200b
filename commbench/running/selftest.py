"""`commbench selftest`'s work: plan the steps this machine supports, make the run folder and run them; the command
prints the table (or the document) and exits with the verdict."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commbench.names import BackendChoice, DeviceChoice
    from commbench.selftest import Selftest
    from commbench.selftest.plan import Plan


def run_selftest_command(*, backend: BackendChoice, device: DeviceChoice, nproc: int | None,
                         only: tuple[str, ...], timeout_s: float, oversubscribe: bool, out: Path,
                         run_id: str | None, argv: list[str],
                         accepted: Callable[[], object], started: Callable[[Plan, Path], None],
                         announce: Callable[[str], None]) -> Selftest:
    """The planned steps into a new run folder (default name selftest-<UTC time>-<host>). accepted() is called once
    the plan is, started(plan, run folder) once the folder is made, announce(line) as each step goes."""
    from commbench.execution import torch_host
    from commbench.selftest import run_selftest
    from commbench.selftest.plan import plan_selftest
    from commbench.store import create_run_dir

    plan = plan_selftest(torch_host.machine(), backend=backend, device=device, nproc=nproc, only=only,
                         timeout_s=timeout_s, oversubscribe=oversubscribe)
    accepted()
    run_dir = create_run_dir(out, run_id, prefix="selftest-")
    started(plan, run_dir)
    return run_selftest(plan, run_dir, argv=argv, announce=announce)
