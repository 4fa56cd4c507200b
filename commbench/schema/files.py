"""Every file of declared columns, by bench kind: what the store checks against and the column reference lists."""

from dataclasses import dataclass

from commbench.schema import collective, hunt, p2p, replay, training
from commbench.schema.column import Column


@dataclass(frozen=True)
class DeclaredFile:
    """One CSV file of a bench kind: its name under the run folder, and its columns in file order."""

    kinds: str
    """The bench kinds that write it, as the reference names them."""
    name: str
    columns: tuple[Column, ...]
    required: tuple[Column, ...] = ()
    """What a file must have to be read (results.csv); the rest were added later and read as empty when absent."""


FILES = (
    DeclaredFile("collective (commbench sweep)", "results.csv", collective.RESULT_COLUMNS,
                 collective.REQUIRED_COLUMNS),
    DeclaredFile("collective (commbench sweep)", "samples.csv", collective.SAMPLE_COLUMNS),
    DeclaredFile("collective (commbench sweep)", "gpu_samples.csv", collective.GPU_SAMPLE_COLUMNS),
    DeclaredFile("collective (commbench sweep)", "iteration_times.csv", collective.ITERATION_COLUMNS),
    DeclaredFile("ddp, fsdp, strategy (training sweeps)", "results.csv", training.RESULT_COLUMNS,
                 training.REQUIRED_COLUMNS),
    DeclaredFile("ddp, fsdp, strategy (training sweeps)", "samples.csv", training.SAMPLE_COLUMNS),
    DeclaredFile("p2p (commbench p2p)", "results.csv", p2p.RESULT_COLUMNS, p2p.REQUIRED_COLUMNS),
    DeclaredFile("p2p (commbench p2p)", "samples.csv", p2p.SAMPLE_COLUMNS),
    DeclaredFile("hunt (commbench hunt)", "results.csv", hunt.RESULT_COLUMNS, hunt.REQUIRED_COLUMNS),
    DeclaredFile("hunt (commbench hunt)", "samples.csv", hunt.SAMPLE_COLUMNS),
    DeclaredFile("replay (commbench replay)", "results.csv", replay.RESULT_COLUMNS, replay.REQUIRED_COLUMNS),
    DeclaredFile("replay (commbench replay)", "samples.csv", replay.SAMPLE_COLUMNS),
)


def _by_name() -> dict[str, Column]:
    found: dict[str, Column] = {}
    for file in FILES:
        for column in file.columns:
            found.setdefault(column.name, column)
    return found


COLUMNS = _by_name()
"""Every declared column by name (a name several kinds declare has one dtype: tests/test_schema.py checks)."""
NUMERIC_COLUMNS = tuple(name for name, column in COLUMNS.items() if column.numeric)
"""The columns that hold numbers (or nothing): the store refuses a file holding anything else there."""
