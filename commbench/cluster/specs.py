"""What the hunt and p2p rank sides read of their specs, and the closed choices among those fields.

The specs themselves are declared with their kinds (commbench/benches/hunt.py's HuntSpec, benches/p2p.py's
P2pSpec), which import cluster/; cluster/ cannot import them back, so it names the fields it reads here as
protocols (read-only, as the frozen specs hold them). Plain typing: `commbench --help` imports this module."""

from typing import Literal, Protocol, get_args

Statistic = Literal["median", "p10"]
"""The figure of a measurement's samples (--statistic): the median, or the 10th percentile (noisy shared hosts)."""
STATISTICS: tuple[Statistic, ...] = get_args(Statistic)

HuntPhase = Literal["intra", "pairs", "second_pass"]
"""The points of a hunt, in run order: intra-node all_reduce, the node pairs (first pass), the second pass."""
PHASES: tuple[HuntPhase, ...] = get_args(HuntPhase)

Schedule = Literal["concurrent", "serial"]
"""How p2p runs its pairs (--schedule): the disjoint pairs of a round at once, or one pair at a time."""
SCHEDULES: tuple[Schedule, ...] = get_args(Schedule)


class RowSettings(Protocol):
    """The spec fields both kinds write into their rows."""

    @property
    def backend(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def statistic(self) -> Statistic: ...
    @property
    def expectation(self) -> dict: ...
    @property
    def warmup(self) -> int: ...
    @property
    def iters(self) -> int: ...


class HuntSettings(RowSettings, Protocol):
    """What `commbench hunt`'s rank side reads of HuntSpec."""

    @property
    def intra_sizes(self) -> tuple[int, ...]: ...
    @property
    def pair_size(self) -> int: ...
    @property
    def latency_size(self) -> int: ...
    @property
    def latency_iters(self) -> int: ...
    @property
    def threshold_pct(self) -> float: ...
    @property
    def min_z(self) -> float: ...
    @property
    def alpha(self) -> float: ...
    @property
    def stall_factor(self) -> float: ...
    @property
    def baseline(self) -> dict[str, float] | None: ...
    @property
    def confirm_partners(self) -> int: ...
    @property
    def confirm_repeats(self) -> int: ...
    @property
    def random_rounds(self) -> int: ...
    @property
    def pairs_at_once(self) -> int: ...
    @property
    def seed(self) -> int: ...


class P2pSettings(RowSettings, Protocol):
    """What `commbench p2p`'s rank side reads of P2pSpec."""

    @property
    def schedule(self) -> Schedule: ...


class PhasePoint(Protocol):
    """A hunt point (benches/hunt.py's HuntPoint): which phase it runs."""

    @property
    def phase(self) -> HuntPhase: ...


class SizePoint(Protocol):
    """A p2p point (benches/p2p.py's P2pPoint): the bytes each transfer sends."""

    @property
    def size_bytes(self) -> int: ...
