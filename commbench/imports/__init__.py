"""`commbench import`: other tools' result files as commbench runs. A source is one module that reads its tool's
files into ImportedFile (model.py); write.py makes the run folder. Adding a tool: its reader module and its line in
SOURCES."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict, Unpack

from commbench import names
from commbench.errors import CommbenchError
from commbench.imports.model import NCCL_INSPECTOR, ImportedFile, SourceName

if TYPE_CHECKING:  # the readers load when a file is read: `commbench --help` lists the sources without them
    from commbench.imports.nccl_inspector import Selection


class ReadOptions(TypedDict, total=False):
    """What `commbench import` passes a source's reader besides the file: the text sources' --collective,
    --world-size and --partial; the Inspector's selection of communicators."""

    collective: str | None
    world_size: int | None
    partial: bool
    selection: Selection


class Reader(Protocol):
    """A source's reader: (file name, its sha256, its text, the options) → ImportedFile."""

    def __call__(self, name: str, sha256: str, text: str, **options: Unpack[ReadOptions]) -> ImportedFile: ...


@dataclass(frozen=True)
class Source:
    command: SourceName
    """`commbench import COMMAND FILE...` and the rows' source column."""
    read: Reader
    """(name, sha256, text, collective=, world_size=, partial=) → ImportedFile."""
    factor: Callable[[str, int], float | None]
    """The tool's busbw factor of a collective at a world size (None where it does not follow from the size)."""
    collective_option: Callable[[str], str]
    """--collective as the user wrote it → the rows' collective name."""


NCCL_TESTS: SourceName = "nccl-tests"
NCCL_TESTS_TIMING_METHOD = (
    "nccl-tests: the wall time of calls_per_sample back-to-back calls after the warm-up, divided by the calls (a mean "
    "per call), averaged over ranks (its -a 1 default); its busbw follows from that time. samples.csv, where present, "
    "holds its per-iteration CUDA-event times (max over processes)")


def _read_nccl_tests(name: str, sha256: str, text: str, **options: Unpack[ReadOptions]) -> ImportedFile:
    from commbench.imports import nccl_tests_json, nccl_tests_text

    collective, world_size = options["collective"], options["world_size"]
    if nccl_tests_json.looks_like_json(text):
        version, tests = nccl_tests_json.parse(text, name, collective=collective, world_size=world_size)
        written_by_commbench = nccl_tests_json.written_by_commbench(text)
    else:
        version, tests = nccl_tests_text.parse(text, name, collective=collective, world_size=world_size,
                                               partial=options["partial"])
        written_by_commbench = nccl_tests_text.written_by_commbench(text)
    # commbench perf prints nccl-tests' layout from whatever backend it ran on: its own header says which
    backend, device = written_by_commbench or (names.NCCL, names.CUDA)
    return ImportedFile(name, sha256, NCCL_TESTS, version, backend, device, NCCL_TESTS_TIMING_METHOD, tests)


def _read_param(name: str, sha256: str, text: str, **options: Unpack[ReadOptions]) -> ImportedFile:
    from commbench.imports import param_text

    version, tests, backend, device = param_text.parse(text, name, collective=options["collective"],
                                                       world_size=options["world_size"], partial=options["partial"])
    notes = [] if backend else ["PARAM's 'backend:' line is missing: backend recorded as unknown"]
    return ImportedFile(name, sha256, param_text.TOOL, version, backend or "unknown", device or "unknown",
                        param_text.TIMING_METHOD, tests, notes)


def _read_inspector(name: str, sha256: str, text: str, **options: Unpack[ReadOptions]) -> ImportedFile:
    from commbench.imports import nccl_inspector

    return nccl_inspector.read_file(name, sha256, text, selection=options["selection"])


def _param_factor(collective: str, world: int) -> float | None:
    from commbench.imports import param_text

    return param_text.factor(collective, world)


SOURCES: dict[SourceName, Source] = {
    NCCL_TESTS: Source(NCCL_TESTS, _read_nccl_tests, names.busbw_factor, names.nccl_tests_collective_option),
    "param": Source("param", _read_param, _param_factor, lambda text: text.strip()),
    # the Inspector's busbw formulas are nccl-tests' (inspector.cc inspectorComputeOpBw); its logs name the
    # collective, so it has no --collective
    NCCL_INSPECTOR: Source(NCCL_INSPECTOR, _read_inspector, names.busbw_factor, lambda text: text.strip()),
}


def read_file(source: Source, path: Path, **options: Unpack[ReadOptions]) -> ImportedFile:
    """One file of the tool, checksummed; an unreadable or non-text file is one CommbenchError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CommbenchError(f"{path} does not exist; pass the {source.command} output file") from None
    except IsADirectoryError:
        raise CommbenchError(f"{path} is a folder; pass the {source.command} output file(s) inside it") from None
    except OSError as error:
        raise CommbenchError(f"cannot read {path}: {error.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CommbenchError(f"{path} is not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start}); pass "
                             f"the text {source.command} printed") from None
    return source.read(path.name, hashlib.sha256(data).hexdigest(), text, **options)
