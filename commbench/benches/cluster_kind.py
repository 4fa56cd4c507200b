"""What the kinds whose rank side lives in its own folder (hunt, p2p, replay) share: a spec class, and a rank side and a
table each kind imports where it names them (sides()), only when used, so `commbench --help` stays
light."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from commbench.bench_kind import BenchKind, Measured, OptionsT, PointT, RankRun, SpecT, StateT

if TYPE_CHECKING:
    import pandas as pd

    from commbench.bench_kind import RankContext

_SpecIn = TypeVar("_SpecIn", contravariant=True)
_PointIn = TypeVar("_PointIn", contravariant=True)
_State = TypeVar("_State")


class RankSide(Protocol[_SpecIn, _PointIn, _State]):
    """A kind's rank module (e.g. commbench/cluster/hunt_rank.py): its prepare() and measure()."""

    def prepare(self, spec: _SpecIn, ctx: RankContext, /) -> _State: ...

    def measure(self, spec: _SpecIn, point: _PointIn, run: RankRun[_State], /) -> Measured: ...


class TableSide(Protocol):
    """A kind's table module (e.g. commbench/cluster/hunt_table.py): its terminal table and key numbers."""

    def format_table(self, results: pd.DataFrame, /) -> str: ...

    def key_numbers(self, results: pd.DataFrame, /) -> pd.DataFrame: ...


class ClusterKind(BenchKind[SpecT, PointT, OptionsT, StateT]):
    spec_class: type[SpecT]

    def sides(self) -> tuple[RankSide[SpecT, PointT, StateT], TableSide]:
        """The rank side, which defines prepare(spec, ctx) and measure(spec, point, run), and the table side, which
        defines format_table(results) and key_numbers(results): imported here, where a kind names them."""
        raise NotImplementedError

    def spec_from_json(self, text: str) -> SpecT:
        return self.spec_class.from_json(text)

    def prepare(self, spec: SpecT, ctx: RankContext) -> StateT:
        return self.sides()[0].prepare(spec, ctx)

    def measure(self, spec: SpecT, point: PointT, run: RankRun[StateT]) -> Measured:
        return self.sides()[0].measure(spec, point, run)

    def table(self, results: pd.DataFrame, verbose: bool = False) -> str:  # one layout, short already
        return self.sides()[1].format_table(results)

    def key_numbers(self, results: pd.DataFrame) -> pd.DataFrame:
        return self.sides()[1].key_numbers(results)
