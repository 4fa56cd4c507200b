"""What the kinds whose rank side lives in its own folder (hunt, p2p, replay) share: a spec class, and a rank side and a
table each kind imports where it names them (sides()), only when used, so `commbench --help` stays
light."""

from types import ModuleType

from commbench.bench_kind import BenchKind, Measured, RankRun, Spec


class ClusterKind(BenchKind):
    spec_class: type[Spec] = Spec

    def sides(self) -> tuple[ModuleType, ModuleType]:
        """The rank side, which defines prepare(spec, ctx) and measure(spec, point, run), and the table side, which
        defines format_table(results) and key_numbers(results): imported here, where a kind names them."""
        raise NotImplementedError

    def spec_from_json(self, text):
        return self.spec_class.from_json(text)

    def prepare(self, spec, ctx):
        return self.sides()[0].prepare(spec, ctx)

    def measure(self, spec, point, run: RankRun) -> Measured:
        return self.sides()[0].measure(spec, point, run)

    def table(self, results, verbose: bool = False) -> str:  # one layout, short already
        return self.sides()[1].format_table(results)

    def key_numbers(self, results):
        return self.sides()[1].key_numbers(results)
