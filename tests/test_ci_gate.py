"""benchmarks/ci_gate.py, CI's gate tested against itself: how it sizes the slowdown fault from the first unchanged
launch, and which verdicts make a round right. (CI runs the whole round after the tests; its rates over ten rounds
are in docs/measurements.md.)"""

import sys
from pathlib import Path

import pytest

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import ci_gate  # noqa: E402  (a benchmark script, beside the tests' path)

pytestmark = pytest.mark.no_process

LAUNCH = ROOT / "results" / "baselines" / "cpu-ci" / "launch1"
"""A real launch of the suite cpu-ci (2-core VM)."""


def test_the_fault_makes_every_rows_median_call_at_least_twice_as_long():
    slowdown = ci_gate.slowdown_pct(LAUNCH)
    rows = store.read_results(LAUNCH / "gate", COLLECTIVE)
    for p50, fastest in rows[["time_us_p50", "time_us_min"]].to_numpy():
        added = slowdown / 100 * fastest  # the fault's wait: its share of the rank's fastest call
        assert (p50 + added) / p50 >= ci_gate.SLOWED_FACTOR - 1e-9
    tails = (rows["time_us_p50"] / rows["time_us_min"]).max()
    assert slowdown == pytest.approx((ci_gate.SLOWED_FACTOR - 1) * tails * 100)


@pytest.mark.parametrize("unchanged_failed, slowed_caught, right", [
    (False, True, True), (True, True, False), (False, False, False), (True, False, False)])
def test_a_round_is_right_only_when_unchanged_passes_and_the_slowdown_fails(unchanged_failed, slowed_caught, right):
    result = ci_gate.Round(unchanged_failed, slowed_caught, ("# gate: ...", "# gate: ..."), 150.0)
    assert result.right is right
    said = ci_gate.say(result)
    assert ("FAILED (a false alarm)" in said) is unchanged_failed and ("failed (caught)" in said) is slowed_caught
