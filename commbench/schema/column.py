"""A column of a results or samples file, declared once: its name, unit, type and meaning.

A Column is the name itself (a str), so a row dict and a DataFrame take it as their key and a file's header is
written from it unchanged; its unit, dtype and meaning ride along for the readers that need them (the store's checks,
the docs' column reference). Code names a column through its declaration (`collective.TIME_US_P50`), so renaming or
removing one makes the type checker name every use."""

import math
from collections.abc import Iterable
from typing import Literal

Dtype = Literal["int", "float", "bool", "str"]
"""What a column holds when it holds anything (every column may be empty: not measured, not applicable). str is text,
including the columns that hold a number or a name (--bucket-cap-mb's "default")."""
NUMERIC: tuple[Dtype, ...] = ("int", "float")


class Column(str):
    """One column: the string is its name in the file's header."""

    unit: str
    dtype: Dtype
    meaning: str

    def __new__(cls, name: str, dtype: Dtype, meaning: str, *, unit: str = "") -> "Column":
        column = super().__new__(cls, name)
        column.unit, column.dtype, column.meaning = unit, dtype, meaning
        return column

    @property
    def name(self) -> str:
        """The plain string (what a header holds)."""
        return str.__str__(self)

    @property
    def numeric(self) -> bool:
        return self.dtype in NUMERIC

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        # pickled (a row gathered across ranks) as its name: equal, and the same key, on the other side
        return str, (self.name,)


def names(columns: Iterable[Column]) -> tuple[str, ...]:
    """The plain names, for messages and comparisons with headers."""
    return tuple(column.name for column in columns)


def without(columns: tuple[Column, ...], left_out: Iterable[Column]) -> tuple[Column, ...]:
    """columns in their order, less those left out (a file's required columns: its columns less those added later)."""
    dropped = set(left_out)
    return tuple(column for column in columns if column not in dropped)


def is_empty(value: object) -> bool:
    """Whether a cell holds nothing: None as a row holds it, or NaN as pandas reads an empty CSV cell."""
    return value is None or (isinstance(value, float) and math.isnan(value))
