"""The files of a run under results/<run-id>/: meta.json, results.csv, samples.csv (their columns are each bench
kind's: commbench/benches/), and how they are written and read.

Rank 0 appends and flushes one row per finished point, so a crash loses nothing already measured; readers drop a
torn last line. Every file carries schema_version: newer files are refused, foreign ones named as such.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import platform
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from commbench.errors import CommbenchError
from commbench.schema import common
from commbench.schema.files import NUMERIC_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 1
META_FILE, RESULTS_FILE, SAMPLES_FILE, GPU_SAMPLES_FILE, SPEC_FILE, LAUNCH_LOG = (
    "meta.json", "results.csv", "samples.csv", "gpu_samples.csv", "spec.json", "launch.log")
ITERATIONS_FILE = "iteration_times.csv"
"""Per-rank times of each iteration inside each batch (batch timing with --iteration-times, nccl-tests -I 1)."""

STATUS_RUNNING, STATUS_COMPLETE, STATUS_FAILED = "running", "complete", "failed"
SUITE_KIND = "suite"
"""meta.json's kind of a suite run: a folder of bench runs (commbench run)."""

class RowWriter:
    """Appends rows to one CSV, writing the header once; each row reaches the disk before the call returns."""

    def __init__(self, path: Path, columns: Sequence[str]) -> None:
        self._columns = columns
        new_file = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="", encoding="utf-8")
        if new_file:
            self._write([columns])

    def write(self, rows: Iterable[Mapping[str, object]]) -> None:
        self._write([[row[column] for column in self._columns] for row in rows])  # a missing column is a bug

    def _write(self, rows: Iterable[Sequence[object]]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        self._file.write(buffer.getvalue())  # one write per batch keeps a killed writer from interleaving rows
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def write_rows(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, object]]) -> None:
    """rows appended to one CSV at once (RowWriter, closed after): a file written whole rather than row by row."""
    writer = RowWriter(path, columns)
    try:
        writer.write(rows)
    finally:
        writer.close()


def write_meta(run_dir: Path, meta: dict) -> None:
    """Replace meta.json atomically so a reader (or a crash) never sees half a file. On a full disk, where the
    temporary copy finds no room, meta.json is rewritten in place: the old file's own space takes the new one, and
    a run that failed says so rather than "running" forever."""
    text = json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n"
    temporary = run_dir / f".{META_FILE}.{os.getpid()}.tmp"
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, run_dir / META_FILE)
    except BaseException as error:  # disk full, read-only, or a signal: no stray temporary is left
        temporary.unlink(missing_ok=True)
        if not (isinstance(error, OSError) and error.errno in _NO_SPACE and (run_dir / META_FILE).exists()):
            raise
        with open(run_dir / META_FILE, "r+", encoding="utf-8") as file:
            file.truncate(0)
            file.write(text)
            file.flush()
            os.fsync(file.fileno())


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def remove_stray_temporaries(run_dir: Path) -> None:
    """The temporary meta.json copies of writers that were killed between writing and renaming one (a rank that got
    SIGKILL); call it only when no writer of the folder is left."""
    for temporary in Path(run_dir).glob(f".{META_FILE}.*.tmp"):
        temporary.unlink(missing_ok=True)


def read_meta(run_dir: Path) -> dict[str, Any]:
    """meta.json as written: a JSON object whose fields each reader checks as it uses them (Any: JSON values)."""
    path = Path(run_dir) / META_FILE
    try:
        meta = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise CommbenchError(f"{path} is not valid JSON ({error.msg}, line {error.lineno}); it was not written by "
                             "commbench or was damaged: re-record the run") from None
    if not isinstance(meta, dict):
        raise CommbenchError(f"{path} holds a JSON {type(meta).__name__}, not an object; it was not written by "
                             "commbench: point at a results/<run-id> folder")
    _check_version(path, meta.get("schema_version"))
    _check_meta_fields(path, meta)
    return meta


def _check_meta_fields(path: Path, meta: dict) -> None:
    """The fields readers act on have the types commbench writes: a foreign or edited file is named here rather than
    failing later as a TypeError deep in a reader."""
    for name in ("kind", "status", "run_id", "reason"):
        if meta.get(name) is not None and not isinstance(meta[name], str):
            raise CommbenchError(f"{path}: field {name!r} is {meta[name]!r}, not a string; the file was not written "
                                 "by commbench or was edited: re-record the run")
    benches = meta.get("benches")
    if benches is None:
        return
    names = [bench.get("name") if isinstance(bench, dict) else None for bench in benches] \
        if isinstance(benches, list) else [None]
    for entry in names:
        if not (isinstance(entry, str) and _RUN_ID.fullmatch(entry)):  # a bench folder's name, never a path elsewhere
            raise CommbenchError(f"{path}: field 'benches' must list objects whose 'name' is a bench folder's name "
                                 f"(found {benches!r:.80}); the file was not written by commbench or was edited: "
                                 "re-record the run")


def read_text(path: Path) -> str:
    """A file commbench wrote, as text; a missing, unreadable or non-UTF-8 file is one CommbenchError naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _not_found(path) from None
    except IsADirectoryError:
        raise CommbenchError(f"{path} is a folder where commbench expects a file; point at a results/<run-id> "
                             "folder written by commbench") from None
    except NotADirectoryError:
        raise CommbenchError(f"{_first_file(path)} is a file where commbench expects a run folder; point at a "
                             "results/<run-id> folder") from None
    except UnicodeDecodeError as error:
        raise CommbenchError(f"{path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                             f"{error.start}); it was not written by commbench or was damaged: re-record the run"
                             ) from None
    except OSError as error:
        raise CommbenchError(f"cannot read {path}: {error.strerror}") from None


def _first_file(path: Path) -> Path:
    """The part of path that is a file (what NotADirectoryError is about)."""
    for parent in reversed(path.parents):
        if parent.is_file():
            return parent
    return path


def update_meta(run_dir: Path, **fields: object) -> dict[str, Any]:
    meta = read_meta(run_dir)
    meta.update(fields)
    write_meta(run_dir, meta)
    return meta


def read_rows(path: Path, required: Sequence[str], numeric: Sequence[str] = ()) -> pd.DataFrame:
    """A results or samples CSV as a DataFrame; a torn last line from a crash is dropped. Every other row must have
    the header's fields, and the columns in `numeric` (those present) numbers or nothing: a damaged or edited file
    is refused at the line that is wrong, not read into wrong numbers."""
    path = Path(path)
    text = read_text(path)
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    header = text.split("\n", 1)[0].split(",") if text else []
    missing = [column for column in required if column not in header]
    if missing:
        raise CommbenchError(f"{path} is not a commbench results file (missing columns {', '.join(missing[:4])}); "
                             "pass a results.csv that commbench wrote")
    lines = _record_lines(path, text)
    import pandas as pd  # only readers need it; the ranks that write rows do not

    try:
        # empty is "not measured" and nan is how Python writes a float NaN; pandas' other NA spellings (n/a, NULL,
        # #N/A, ...) are not commbench's and stay text, so a numeric column holding one is refused below
        frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=_NOT_MEASURED)
    except pd.errors.ParserError as error:  # what the field count above did not catch (e.g. quoting)
        raise CommbenchError(f"{path} is not a well-formed CSV file ({str(error).strip()}); re-record the run"
                             ) from None
    for column in [column for column in numeric if column in frame.columns]:
        _check_numbers(path, frame, column, lines)
    _check_keys_and_versions(path, frame, lines)
    return frame


_NOT_MEASURED = ["", "nan", "NaN"]
NEVER_EMPTY = (common.SCHEMA_VERSION, common.WORLD_SIZE, common.SIZE_BYTES)
"""Numbers every row that has the column states: the version it was written in and the keys a row is matched and
fitted by (an empty one would drop the row from a fit or a comparison without a word)."""


def _record_lines(path: Path, text: str) -> list[int]:
    """The line each data row starts on, after checking that every row has as many fields as the header."""
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        header = next(reader, [])
        starts, start = [], reader.line_num + 1
        for fields in reader:
            if len(fields) != len(header):
                raise CommbenchError(f"{path} line {start} has {len(fields)} fields where its header has "
                                     f"{len(header)}; the file was damaged or edited: re-record the run")
            starts.append(start)
            start = reader.line_num + 1
    except csv.Error as error:
        raise CommbenchError(f"{path} line {reader.line_num} is not well-formed CSV ({error}); re-record the run"
                             ) from None
    return starts


def _check_numbers(path: Path, frame: pd.DataFrame, column: str, lines: list[int]) -> None:
    import pandas as pd

    values = frame[column]
    if values.dtype.kind in "iuf":  # pandas parsed every value as a number (or empty)
        return
    bad = values.notna() & pd.to_numeric(values, errors="coerce").isna()
    if bad.any():
        index = int(bad.to_numpy().nonzero()[0][0])
        raise CommbenchError(f"{path} line {lines[index]}, column {column}: {values.iloc[index]!r} is not a number; "
                             "the file was damaged or edited: re-record the run")


def _check_keys_and_versions(path: Path, frame: pd.DataFrame, lines: list[int]) -> None:
    for column in [column for column in NEVER_EMPTY if column in frame.columns]:
        absent = frame[column].isna().to_numpy().nonzero()[0]
        if len(absent):
            raise CommbenchError(f"{path} line {lines[int(absent[0])]} has no {column}: it was not written by "
                                 "commbench or was edited: re-record the run")
    versions = frame[common.SCHEMA_VERSION]
    for version in versions.unique():
        first = int((versions == version).to_numpy().nonzero()[0][0])
        _check_version(f"{path} line {lines[first]}", version.item() if hasattr(version, "item") else version)


def kind_name(run_dir: Path) -> str:
    """The bench kind a run folder holds, from its meta.json ("suite" for a suite run). Runs written before
    meta.json named the kind (schema_version 1 without "kind") are migrated from the `bench` value of their rows,
    which has always named the kind."""
    meta = read_meta(run_dir)
    if meta.get("kind"):
        return meta["kind"]
    path = Path(run_dir) / RESULTS_FILE
    if path.exists():
        first = next(csv.DictReader(io.StringIO(read_text(path))), None)
        if first and first.get(common.BENCH):
            return first[common.BENCH]
    raise CommbenchError(f"{Path(run_dir) / META_FILE} does not name its bench kind and has no rows to tell it; "
                         "pass a run folder written by commbench")


def run_id_of(run_dir: Path) -> str:
    """The run_id its rows carry: the folder name, or suite-run/bench for a bench of a suite."""
    return read_meta(run_dir).get("run_id") or Path(run_dir).name


def suite_bench_dirs(run_dir: Path) -> dict[str, Path] | None:
    """The bench folders of a suite run (`commbench run`), by bench name; None when run_dir is not a suite run (or
    has no meta.json: the reader that needs one names the problem)."""
    path = Path(run_dir) / META_FILE
    if not path.exists():
        return None
    meta = read_meta(run_dir)
    if meta.get("kind") != SUITE_KIND:
        return None
    return {bench["name"]: Path(run_dir) / bench["name"] for bench in meta.get("benches", [])}


# NUMERIC_COLUMNS (commbench/schema/files.py): every column declared int or float, which compare, fit, report and the
# tables compute with: a value there that is not a number (or empty) is refused at its line by the reader, instead of
# surfacing as a TypeError in pandas or a wrong figure.


class KindColumns(Protocol):
    """What the readers need of a bench kind (commbench/bench_kind.py BenchKind): its files' columns."""

    @property
    def required_columns(self) -> tuple[str, ...]: ...
    @property
    def result_columns(self) -> tuple[str, ...]: ...
    @property
    def sample_columns(self) -> tuple[str, ...]: ...
    @property
    def identity(self) -> tuple[str, ...]: ...
    @property
    def column_defaults(self) -> Mapping[str, object]: ...


def read_results(run_dir: Path, kind: KindColumns) -> pd.DataFrame:
    """The rows of a run of this bench kind (a BenchKind); columns added after a file was written come back
    empty."""
    frame = read_rows(Path(run_dir) / RESULTS_FILE, kind.required_columns, NUMERIC_COLUMNS)
    return _fill_absent(frame, kind.result_columns, kind)


def imported_without_samples(run_dir: Path) -> bool:
    """A run `commbench import` wrote from a tool that records no per-iteration samples: it has no samples.csv, and
    readers take its rows alone (a run commbench measured always has one)."""
    return not (Path(run_dir) / SAMPLES_FILE).exists() and bool(read_meta(run_dir).get("source"))


def read_samples(run_dir: Path, kind: KindColumns) -> pd.DataFrame:
    required = [column for column in kind.sample_columns if column not in kind.column_defaults]
    frame = read_rows(Path(run_dir) / SAMPLES_FILE, required, NUMERIC_COLUMNS)
    return _fill_absent(frame, kind.sample_columns, kind)


def _fill_absent(frame: pd.DataFrame, columns: Sequence[str], kind: KindColumns) -> pd.DataFrame:
    for column in columns:
        if column not in frame.columns:
            default = kind.column_defaults.get(column)  # a scalar every row of an older file gets
            frame[column] = default if isinstance(default, (str, int, float)) else None
        elif column in kind.identity and isinstance(kind.column_defaults.get(column), str):
            # a key written empty (the default environment's env "") reads back as NaN: a NaN key would drop the
            # row from groupings and joins
            frame[column] = frame[column].astype(object).where(frame[column].notna(), kind.column_defaults[column])
    return frame


def _not_found(path: Path) -> CommbenchError:
    return CommbenchError(f"{path} does not exist: point at a results/<run-id> folder written by commbench")


def _check_version(path: Path | str, version: object) -> None:
    if version is None:
        raise CommbenchError(f"{path} has no schema_version: it was not written by commbench")
    number = _whole_number(version)
    if number is None:
        raise CommbenchError(f"{path} has schema_version {version!r}, not a whole number: it was not written by "
                             "commbench or was edited: re-record the run")
    if number > SCHEMA_VERSION:
        raise CommbenchError(f"{path} has schema_version {version}, newer than this commbench reads "
                             f"({SCHEMA_VERSION}); upgrade commbench")
    if number < 1:
        raise CommbenchError(f"{path} has schema_version {version}; commbench numbers them from 1: the file was "
                             "edited: re-record the run")


def _whole_number(value: object) -> int | None:
    """The int of a whole number as JSON or pandas holds it (a CSV column of whole numbers may be read as floats next
    to NaN); None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value) if float(value) == int(value) else None
    except (TypeError, ValueError, OverflowError):
        return None


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RUN_ID_MAX = 200
"""Longest --run-id: file systems allow 255 bytes per name, and a Slurm job's or a suite's files add their own
names under the folder; a longer id would fail at mkdir (or later, at a file inside) instead of being refused."""


def check_run_id(run_id: str) -> None:
    if not _RUN_ID.fullmatch(run_id):  # fullmatch: '$' alone would let a trailing newline through
        raise CommbenchError(f"--run-id {run_id!r} is not a folder name; use letters, digits, '.', '_' and '-'")
    if len(run_id) > RUN_ID_MAX:
        raise CommbenchError(f"--run-id is {len(run_id)} characters long; use at most {RUN_ID_MAX}")


def _cannot_create(path: Path, error: OSError) -> CommbenchError:
    return CommbenchError(f"cannot create {path}: {error.strerror or error}; free space or choose a writable --out")


def default_run_id() -> str:
    """UTC time + host, e.g. 20261129T084512Z-node17: sorts by time, tells machines apart."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", platform.node().split(".")[0]) or "host"
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{host}"


def create_run_dir(out: Path, run_id: str | None, *, prefix: str = "") -> Path:
    """Make results/<run-id>/ atomically; a taken default id (prefix + UTC time + host) gets a -2, -3… suffix, a taken
    chosen one is refused."""
    out = Path(out)
    if run_id is not None:
        check_run_id(run_id)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file (or a device) of that name
        raise CommbenchError(f"--out {out} is a file, not a folder; choose a folder for the run folders") from None
    except OSError as error:
        raise CommbenchError(f"cannot create --out {out}: {error.strerror}; choose a writable folder") from None
    if run_id is not None:
        try:
            (out / run_id).mkdir()
        except FileExistsError:
            raise CommbenchError(f"{out / run_id} already exists; choose another --run-id") from None
        except OSError as error:
            raise _cannot_create(out / run_id, error) from None
        return out / run_id
    base = prefix + default_run_id()
    for attempt in range(1, 1000):
        candidate = out / (base if attempt == 1 else f"{base}-{attempt}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
        except OSError as error:
            raise _cannot_create(candidate, error) from None
    raise CommbenchError(f"cannot find a free run id under {out}; pass --run-id")
