"""FSDP's device meshes in a sweep: configurations of one mesh shape share its process groups, so a sweep of many
HSDP configurations holds as many communicators as one."""

import json
import math

import pytest

from tests.rank_jobs import run_rank_job

pytestmark = pytest.mark.distributed
NPROC = 4


def test_a_sweep_of_hsdp_configurations_does_not_add_process_groups(tmp_path):
    run_rank_job("hsdp_mesh_job.py", NPROC, tmp_path, outputs=[f"rank{rank}.json" for rank in range(NPROC)],
                 timeout=400)
    for rank in range(NPROC):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        groups = result["process_groups"]
        # the first HSDP configuration adds its mesh's replicate and shard groups; later ones, HSDP or 1-D, add none
        assert groups == [groups[0]] * len(groups), groups
        assert all(math.isfinite(loss) for losses in result["losses"] for loss in losses)  # the shared mesh trains
