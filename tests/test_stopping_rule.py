"""The adaptive stopping rule (timing.measure with --target-ci): when it tests, what it stops on, and that stopping
when the interval first looks narrow keeps the interval honest.

The simulation feeds timing.measure samples drawn independently from known distributions (seeded, so every run of
the test sees the same draws) through a one-process stand-in for the rank context: world size 1, where combining
over ranks returns the values unchanged. Nothing is measured here; what is tested is the rule's statistics."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from commbench.measure import timing
from commbench.measure.stats import summarize
from commbench.measure.timing import AUTO_BATCH_OVERHEAD, LOOK_GROWTH, LOOK_STEP_MIN, choose_timing, measure, next_look
from commbench.names import BATCH, PER_ITERATION, STOP_CI, STOP_ITERS, STOP_MAX_TIME

pytestmark = pytest.mark.no_process

TARGET_PCT = 5.0
RUNS = 300


class _Draws:
    """A timer whose samples are independent draws: what the order-statistic interval assumes."""

    method = "simulated draws"
    spins = False

    def __init__(self, draw):
        self._draw = draw

    def time_iterations(self, run, iterations):
        return [float(value) for value in self._draw(iterations)]

    def size_spin(self, agreed_issue_s):
        pass

    def calls_per_segment(self):
        return None

    def launch_cover(self):
        return ""


class _OneRank:
    """The rank context of a world of one: every reduction over ranks is the rank's own value."""

    def __init__(self, draw):
        self._timer = _Draws(draw)

    @property
    def platform(self):
        return self

    def timer(self, barrier, meet=None):
        return self._timer

    def max_over_ranks(self, values):
        return list(values)

    def barrier(self):
        pass

    def meet_on_device(self):
        pass


def _adaptive(draw, *, first=10, target=TARGET_PCT, max_time_s=1e9):
    return measure(lambda: None, ctx=_OneRank(draw), warmup=0, iters=first, target_ci_pct=target,
                   max_time_s=max_time_s)


# name, sampler (rng, n) -> samples, true median
_DISTRIBUTIONS = [
    ("normal, sd 10 %", lambda rng, n: rng.normal(100.0, 10.0, n), 100.0),
    ("log-normal, sigma 0.15", lambda rng, n: rng.lognormal(0.0, 0.15, n), 1.0),
    ("80/20 mixture of 1 and 5 (stalls)",
     lambda rng, n: np.where(rng.random(n) < 0.8, rng.normal(1.0, 0.1, n), rng.normal(5.0, 0.5, n)), None),
    ("Student t, 3 degrees of freedom", lambda rng, n: 100.0 + 5.0 * rng.standard_t(3, n), 100.0),
]


def _true_median(sampler, rng) -> float:
    return float(np.median(sampler(rng, 2_000_000)))


@pytest.mark.parametrize("name, sampler, median", _DISTRIBUTIONS, ids=[d[0] for d in _DISTRIBUTIONS])
def test_stopping_on_the_first_narrow_interval_keeps_its_coverage(name, sampler, median):
    rng = np.random.default_rng(20261201)
    true = median if median is not None else _true_median(sampler, rng)
    covered = far = 0
    counts = []
    for _ in range(RUNS):
        measurement = _adaptive(lambda n: sampler(rng, n))
        assert measurement.stop_reason == STOP_CI
        summary = summarize(measurement.samples_s)
        assert summary.ci_half_width_pct <= TARGET_PCT
        covered += summary.ci_lo <= true <= summary.ci_hi
        far += abs(summary.p50 - true) / true * 100 > TARGET_PCT
        counts.append(summary.n)
    # a nominal 95 % interval; 300 runs leave about ±2.5 % of Monte Carlo error, so 92 % is the floor
    assert covered / RUNS >= 0.92, f"{name}: coverage {covered / RUNS:.1%} over {RUNS} runs"
    # the stopped median lies beyond the target from the truth in few runs (the interval reached ±5 % around it)
    assert far / RUNS <= 0.05, f"{name}: {far} of {RUNS} stopped medians off by more than {TARGET_PCT} %"
    assert min(counts) >= 10  # never before the first look


def counts_tested_at(first: int, up_to: int) -> list[int]:
    """The sample counts at which the stopping rule is tested, from --iters `first`, without a budget to cut them."""
    counts = [first]
    while counts[-1] < up_to:
        counts.append(counts[-1] + next_look(counts[-1]))
    return counts


def test_the_rule_is_tested_after_the_first_samples_then_after_each_eighth_more():
    counts = counts_tested_at(20, 1000)
    assert counts[:10] == [20, 25, 30, 35, 40, 45, 51, 58, 66, 75]
    for earlier, later in zip(counts, counts[1:]):
        assert later - earlier >= LOOK_STEP_MIN
        assert later >= earlier * LOOK_GROWTH
    # few tests: one per 12.5 % more samples, not one per fixed batch
    assert sum(1 for count in counts if count <= 1000) <= 1 + math.ceil(math.log(1000 / 20) / math.log(LOOK_GROWTH))


def test_every_stop_without_budget_pressure_is_at_a_test_count():
    rng = np.random.default_rng(3)
    counts = set(counts_tested_at(10, 100_000))
    for _ in range(20):
        assert len(_adaptive(lambda n: rng.lognormal(0.0, 0.2, n)).samples_s) in counts


def test_fixed_iterations_take_exactly_iters_samples():
    measurement = measure(lambda: None, ctx=_OneRank(lambda n: np.full(n, 1.0)), warmup=0, iters=7)
    assert measurement.stop_reason == STOP_ITERS and len(measurement.samples_s) == 7


def test_a_spread_that_never_narrows_stops_at_the_budget(monkeypatch):
    rng = np.random.default_rng(7)
    # half the samples near 1, half near 100: the median's interval spans the gap however many samples come
    draws = []
    # the rule's clock is a counter the draws advance by 1 ms a sample: what is tested is how the rule sizes its last
    # batch from the rate it saw, which a real sleep on a loaded machine blurs (a batch that sleeps longer than the
    # ones before it ends past the budget with its full count)
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(timing, "time", SimpleNamespace(monotonic=lambda: clock.now, perf_counter=lambda: clock.now))

    def slow_draw(n):
        clock.now += n * 1e-3
        draws.append(n)
        return np.where(rng.random(n) < 0.5, 1.0, 100.0) + rng.random(n)

    measurement = _adaptive(slow_draw, max_time_s=0.3)
    assert measurement.stop_reason == STOP_MAX_TIME
    # the last batch was cut to what the budget had left: the point ends within one sample of its budget, not an
    # eighth past it
    assert draws[-1] < next_look(sum(draws[:-1]))
    assert 0.3 <= clock.now < 0.3 + 1e-3 + 1e-9
    assert summarize(measurement.samples_s).ci_half_width_pct > TARGET_PCT


def test_auto_timing_batches_where_the_barrier_dominates():
    # five 1 ms calls in a 10 ms loop: half the time is overhead (the barriers)
    assert choose_timing([0.001] * 5, 0.010)[0] == BATCH
    # five 10 ms calls in 52.5 ms: 5 % overhead
    assert choose_timing([0.010] * 5, 0.0525)[0] == PER_ITERATION
    edge = 1 / (1 - AUTO_BATCH_OVERHEAD)
    assert choose_timing([1.0] * 3, 3 * edge * 0.999)[0] == PER_ITERATION
    assert choose_timing([1.0] * 3, 3 * edge * 1.001)[0] == BATCH
    mode, why = choose_timing([], 0.0)
    assert mode == PER_ITERATION and "no time to decide from" in why

