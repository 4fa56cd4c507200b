"""FSDP's device meshes in a sweep: configurations of one mesh shape share its process groups, so a sweep of many
HSDP configurations holds as many communicators as one."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env

pytestmark = pytest.mark.distributed
NPROC = 4


def test_a_sweep_of_hsdp_configurations_does_not_add_process_groups(tmp_path):
    job = Path(__file__).parent / "jobs" / "hsdp_mesh_job.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={NPROC}", str(job),
               str(tmp_path)]
    completed = subprocess.run(command, env=commbench_env(), capture_output=True, text=True, timeout=400)
    written = all((tmp_path / f"rank{rank}.json").exists() for rank in range(NPROC))
    # gloo's teardown now and then aborts a rank after the job is done (as in tests/test_training.py's reference job)
    torn_down = written and "terminate called without an active exception" in completed.stderr
    assert completed.returncode == 0 or torn_down, completed.stderr[-3000:]
    for rank in range(NPROC):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        groups = result["process_groups"]
        # the first HSDP configuration adds its mesh's replicate and shard groups; later ones, HSDP or 1-D, add none
        assert groups == [groups[0]] * len(groups), groups
        assert all(math.isfinite(loss) for losses in result["losses"] for loss in losses)  # the shared mesh trains
