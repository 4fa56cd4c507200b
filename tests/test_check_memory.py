"""A checked point needs at most 3.5× its buffer size above an idle rank (nccl-tests: send + recv + expected).

Measured for real by benchmarks/check_memory.py: two fresh gloo ranks per case, peak RSS (VmHWM) of a point run as a
sweep runs it. The cases are among those that needed the most before the check data was written period by period:
all_to_all (send and recv are both the whole size; 7.8× in float32 then) and all_reduce bfloat16 (12.9×), in bfloat16,
where the old int64 and float64 temporaries weighed most. One script run measures both (one start of torch less).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import commbench_env

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_memory.py"
BOUND = 3.5


@pytest.mark.distributed
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux features")
def test_a_checked_point_needs_at_most_3_5_times_its_buffer():
    completed = subprocess.run([sys.executable, str(SCRIPT), "--json", "--size-mib", "64", "--world", "2",
                                "--collective", "all_to_all", "--collective", "all_reduce", "--impl", "builtin",
                                "--dtype", "bfloat16"],
                               env=commbench_env(), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    results = [json.loads(line) for line in completed.stdout.splitlines()]
    assert sorted(result["collective"] for result in results) == ["all_reduce", "all_to_all"]
    for result in results:
        assert result["n_wrong"] == 0
        assert result["multiple"] <= BOUND, result
