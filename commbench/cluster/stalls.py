"""The stall test of `commbench hunt`: a node that is slow sometimes (CPU throttling, retransmits, a flapping link, a
noisy neighbour) moves neither a pair's median nor its 10th percentile, only its tail. In a pair, an exchange that
took longer than --stall-factor × the pair's median bandwidth exchange is a stall (bandwidth and latency exchanges
alike), and what it took beyond its own test's median is time lost. The bar is the bandwidth exchange's, not the
latency exchange's own median: an operating system's scheduling hiccup (a time slice, ~10 ms on a shared VM) is 30×
an 8-byte exchange but less than a large one, while a throttled period, a retransmit timeout or a link flap
outlasts both.

A node is judged on the time lost in its pairs' exchanges (bandwidth and latency pooled) against the other pairs'
exchanges, with a permutation test: were the exchanges of the run dealt to the pairs at random, how often would the
node's pairs hold as much lost time? Stall counts alone do not separate a throttled node from a jittery host (on one
shared host, a latency pair stalled 14 times by a millisecond or two while the throttled node's pairs lost 60-90 ms
per stall); lost time does. Plain numpy; seeded, so a run's verdict can be recomputed from its samples."""

from dataclasses import dataclass

import numpy as np

PERMUTATIONS = 4000
SEED = 0


@dataclass(frozen=True)
class Exchanges:
    """Exchanges' time lost to stalls and their time without it, in seconds (one entry per exchange)."""

    lost_s: np.ndarray
    base_s: np.ndarray
    stalls: int

    @staticmethod
    def of(samples_s: list[float], factor: float, scale_s: float | None = None) -> "Exchanges":
        """A stall takes longer than factor × scale_s (the pair's median bandwidth exchange; None: these samples'
        own median)."""
        times = np.asarray(samples_s, dtype=float)
        if times.size == 0:
            return Exchanges(times, times, 0)
        median = float(np.median(times))
        stalled = times > factor * (median if scale_s is None else max(scale_s, median))
        lost = np.where(stalled, times - median, 0.0)
        return Exchanges(lost, times - lost, int(stalled.sum()))

    @staticmethod
    def pooled(parts: list["Exchanges"]) -> "Exchanges":
        if not parts:
            return Exchanges(np.zeros(0), np.zeros(0), 0)
        return Exchanges(np.concatenate([part.lost_s for part in parts]),
                         np.concatenate([part.base_s for part in parts]), sum(part.stalls for part in parts))

    @property
    def count(self) -> int:
        return int(self.lost_s.size)

    @property
    def lost_pct(self) -> float:
        """Time lost as a share of the time without it: how much slower the stalls made these exchanges."""
        base = float(self.base_s.sum())
        return 100.0 * float(self.lost_s.sum()) / base if base > 0 else 0.0

    @property
    def stall_pct(self) -> float:
        return 100.0 * self.stalls / self.count if self.count else 0.0


@dataclass(frozen=True)
class StallTest:
    p: float
    """One-sided permutation p-value: the node's pairs lost this much time or more by chance."""
    detectable_pct: float
    """The lost-time share the node's pairs would have needed for p < alpha: what this run could have seen."""


def permutation_test(mine: Exchanges, others: Exchanges, alpha: float) -> StallTest | None:
    """Lost time of `mine` against the same number of exchanges drawn at random from all of them."""
    if mine.count < 3 or others.count < 3:
        return None
    pool = np.concatenate([mine.lost_s, others.lost_s])
    observed = float(mine.lost_s.sum())
    draw = np.random.default_rng(SEED)
    order = draw.random((PERMUTATIONS, pool.size)).argsort(axis=1)[:, :mine.count]
    sums = pool[order].sum(axis=1)
    p = (1 + int((sums >= observed - 1e-15).sum())) / (PERMUTATIONS + 1)
    base = float(mine.base_s.sum())
    needed = float(np.quantile(sums, 1 - alpha)) if alpha < 1 else 0.0
    return StallTest(p, 100.0 * needed / base if base > 0 else float("inf"))
