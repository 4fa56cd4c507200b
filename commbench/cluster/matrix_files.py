"""The matrix CSV files of hunt (node × node) and p2p (rank × rank), written whole or not at all."""

import csv
import io
import os
from pathlib import Path


def matrix_csv(labels: list, grid: list[list], corner: str) -> str:
    """A square matrix with its labels down the first column and across the header; the corner names the unit."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([corner, *labels])
    for label, values in zip(labels, grid):
        writer.writerow([label, *("" if value is None else f"{value:.6g}" for value in values)])
    return out.getvalue()


def write_file(path: Path, text: str) -> None:
    """Whole or not at all: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
