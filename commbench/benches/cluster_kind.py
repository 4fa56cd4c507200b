"""What the cluster-acceptance kinds (hunt, p2p) share: a spec that is a plain dataclass written as JSON, and a rank
side and a table that live in commbench/cluster/ (imported only when used, so `commbench --help` stays light)."""

import importlib
import json
from dataclasses import asdict

from commbench.bench_kind import BenchKind, Measured, RankRun


class JsonSpec:
    """A frozen dataclass spec: tuples are written as JSON lists and read back as tuples."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str):
        data = json.loads(text)
        return cls(**{key: tuple(value) if isinstance(value, list) else value for key, value in data.items()})


class ClusterKind(BenchKind):
    spec_class: type = JsonSpec
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
