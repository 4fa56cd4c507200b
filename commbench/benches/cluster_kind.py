"""What the kinds whose rank side lives in its own folder (hunt, p2p, replay) share: a spec class, and a rank side and a
table imported only when used, so `commbench --help` stays light."""

import importlib

from commbench.bench_kind import BenchKind, Measured, RankRun, Spec


class ClusterKind(BenchKind):
    spec_class: type[Spec] = Spec
    rank_module = ""
    """Defines prepare(spec, ctx) and measure(spec, point, run)."""
    table_module = ""
    """Defines format_table(results) and key_numbers(results)."""

    def spec_from_json(self, text):
        return self.spec_class.from_json(text)

    def prepare(self, spec, ctx):
        return importlib.import_module(self.rank_module).prepare(spec, ctx)

    def measure(self, spec, point, run: RankRun) -> Measured:
        return importlib.import_module(self.rank_module).measure(spec, point, run)

    def table(self, results, verbose: bool = False) -> str:  # one layout, short already
        return importlib.import_module(self.table_module).format_table(results)

    def key_numbers(self, results):
        return importlib.import_module(self.table_module).key_numbers(results)
