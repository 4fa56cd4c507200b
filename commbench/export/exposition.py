"""The Prometheus text exposition format (version 0.0.4, the one node_exporter's textfile collector parses): metric
families with `# HELP` and `# TYPE`, one line per sample, label values escaped, no timestamps (the textfile collector
skips a whole file that has one), and the file replaced atomically so a scrape never reads half of it."""

import contextlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from commbench.errors import CommbenchError

MetricType = Literal["counter", "gauge", "histogram", "summary", "untyped"]
"""A family's `# TYPE` in the text format (0.0.4)."""
GAUGE: MetricType = "gauge"
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


@dataclass(frozen=True)
class Sample:
    labels: tuple[tuple[str, str], ...]
    """(name, value) pairs in the order they are written."""
    value: float


@dataclass
class Family:
    """One metric: its name (with its unit), what it means, its type and its samples."""

    name: str
    help: str
    type: MetricType = GAUGE
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _METRIC_NAME.match(self.name):  # a name is code's, never the user's: a wrong one is a bug
            raise ValueError(f"{self.name!r} is not a Prometheus metric name")

    def add(self, labels: dict[str, object], value: float) -> None:
        """A sample; label values become strings (numbers as written in results.csv, None as "")."""
        for name in labels:
            if not _LABEL_NAME.match(name) or name.startswith("__"):
                raise ValueError(f"{name!r} is not a Prometheus label name")
        self.samples.append(Sample(tuple((name, _label_text(value)) for name, value in labels.items()),
                                   float(value)))

    def duplicate(self) -> Sample | None:
        """A sample whose label set another sample of the family has too (Prometheus rejects such a scrape)."""
        seen: set[frozenset[tuple[str, str]]] = set()
        for sample in self.samples:
            key = frozenset(sample.labels)
            if key in seen:
                return sample
            seen.add(key)
        return None


def _label_text(value: object) -> str:
    if hasattr(value, "item") and not isinstance(value, str):  # a numpy scalar, as pandas may hand one out
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):  # an empty cell, as pandas reads it
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # pandas reads a whole-number column with an empty cell as floats: 65536.0
    return str(value)


def text(families: list[Family]) -> str:
    """The exposition of the families that have samples, in the order given."""
    lines = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{name}="{_escape_label(value)}"' for name, value in sample.labels)
            lines.append(f"{family.name}{{{labels}}} {number(sample.value)}" if labels
                         else f"{family.name} {number(sample.value)}")
    return "\n".join(lines) + "\n" if lines else ""


def number(value: float) -> str:
    """A value as the format spells it: the shortest text that reads back as the same float, NaN, +Inf, -Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _escape_help(help_text: str) -> str:
    return help_text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_file(path: Path, content: str) -> None:
    """Replace path with content atomically: written to a temporary file beside it (a name the textfile collector
    skips: it reads only *.prom), then renamed over it, so a scrape reads the old file or the new one, never a part."""
    path = Path(path)
    if path.is_dir():
        raise CommbenchError(f"--out {path} is a folder; give a file name, e.g. --out {path / 'commbench.prom'}")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)  # node_exporter often runs as another user than the one exporting
        os.replace(temporary, path)
    except OSError as error:
        with contextlib.suppress(OSError):  # a folder that does not exist holds no temporary to remove
            temporary.unlink(missing_ok=True)
        raise CommbenchError(f"cannot write --out {path}: {error.strerror or error}; choose a writable file in an "
                             "existing folder") from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
