"""nccl-tests' text output, of any version since 2017 (src/common.cu and src/util.cu over their history):

- `# nThread … minBytes … maxBytes … iters: … validation: …` opens a test; `# nccl-tests version …` (2025 on) and
  `# Collective test starting: PROGRAM` (or the command line a user kept above it) come before it;
- `#  Rank N [Group G] [Pid P] on HOST device D [BUS] NAME` lines, one per rank;
- a column header (`size count type redop [root] time algbw busbw #wrong …`, older `error` or `res` columns, newer
  per-iteration `i_min i_max i_p99 i_cv%` and `timestamp`), a units line (`(us)`; the 2017 layout had none and
  printed milliseconds), then one row per size with out-of-place and in-place column groups;
- `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : X` close it.

Lines may carry a launcher's prefix (Open MPI's `[1,0]<stdout>:`, srun's `0: `); NCCL_DEBUG lines and anything else
between the tables are skipped. Several tests may follow each other in one file.
"""

import functools
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import cast

from commbench import names
from commbench.errors import CommbenchError
from commbench.imports import infer
from commbench.imports.figures import check_busbw, mean_agrees, number
from commbench.imports.model import ImportedRow, ImportedTest, nccl_tests_time

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:\s)")
_HEADER = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_SETTINGS = {"warmup": re.compile(r"warmup iters:\s*(\d+)"),
             "iters": re.compile(r"(?<!warmup )(?<!agg )iters:\s*(\d+)"),
             "agg_iters": re.compile(r"agg iters:\s*(\d+)"), "validation": re.compile(r"validation:\s*(\d+)"),
             "graph": re.compile(r"graph:\s*(\d+)")}
_VERSION = re.compile(r"#?\s*((?:nccl|rccl)-tests):? [Vv]ersion\s+(\S+)")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s+(.*?)\s*$")
_ROW = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z]")
_OUT_OF_BOUNDS = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(\S*)")
_AVERAGE = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(\S+)")
_TIME_COLUMNS = ("time", "cputime")
NOT_MEASURED = "N/A"
"""A body's time as `commbench perf` prints a placement torch.distributed does not have (nccl-tests itself prints
N/A only in #wrong)."""
_COMMBENCH = re.compile(r"#\s*commbench (\S+) perf, nccl-tests \S+ output: torch \S+, (\S+)")
_WRONG_COLUMNS = ("#wrong", "error", "res")
STARTED_FROM = ("its first row's timestamp (nccl-tests -S 1: printed once that size had run), the local time of the "
                "machine that ran it (the log names no zone)")


@dataclass
class _Layout:
    """A table's columns, from its header line."""

    key: list[str]
    groups: list[list[str]]
    """Out-of-place then in-place: time, algbw, busbw, a check column, maybe per-iteration columns."""
    ms: bool = False
    """Times printed in milliseconds (the 2017 layout)."""

    @property
    def width(self) -> int:
        return len(self.key) + sum(len(group) for group in self.groups)


@dataclass
class _Open:
    test: ImportedTest
    settings: dict
    layout: _Layout | None = None
    busbw_texts: list[str] = field(default_factory=list)
    closed: bool = False
    """Its '# Avg bus bandwidth' line was read: what follows belongs to the next test."""


def parse(text: str, file_name: str, *, collective: str | None, world_size: int | None, partial: bool
          ) -> tuple[str | None, list[ImportedTest]]:
    """The nccl-tests version (or None) and the tests of one file; a file that is not nccl-tests output, a cut-off
    row or an unclosed table (without partial) is a CommbenchError naming the line."""
    version: str | None = None
    tests: list[ImportedTest] = []
    current: _Open | None = None
    named: str | None = None
    ranks: list[dict] = []
    for number_, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        where = f"{file_name} line {number_}"
        version = _version(line) or version  # before the test (nccl-tests) or inside it (rccl-tests)
        if (match := _HEADER.match(line.strip())) is not None or _table_without_header(current, line):
            if current is not None:
                _close(current, where, partial, tests)
            current, named = _open_test(line, number_, match, named, collective, where), None
            current.test.ranks, ranks = ranks, []
            if match is None:  # no '# nThread' line (the 2017 layout, or a pasted table): this is its column header
                _read_line(current, line, where)
        elif current is None or current.closed:
            if (rank := _RANK.match(line.strip())) is not None:  # the 2017 layout lists ranks before its table
                ranks.append(_rank(rank))
            elif "concluded" not in line:  # '# Collective test concluded: X' ends the test before, names no next one
                named = names.nccl_tests_program_in(line) or named
        else:
            _read_line(current, line, where)
    if current is not None:
        _close(current, f"{file_name} (its end)", partial, tests)
    if not tests:
        raise CommbenchError(f"{file_name} holds no nccl-tests table (no '# nThread … minBytes … maxBytes' line "
                             "followed by result rows); pass nccl-tests' text output, or its -J JSON")
    _set_world_sizes(tests, file_name, world_size)
    for test in tests:
        infer.settle_collective(test, given=collective, where=f"{file_name}, the table from line {test.line}")
    for test in tests:
        assert test.world_size is not None  # _set_world_sizes gave every test one, or raised
        check_busbw(test, functools.partial(names.busbw_factor, world=test.world_size), names.why_no_busbw_factor)
    return version, tests


def _version(line: str) -> str | None:
    match = _VERSION.match(line.strip()) or _COMMBENCH.match(line.strip())
    if match is None:
        return None
    return f"commbench {match.group(1)} perf" if match.re is _COMMBENCH else f"{match.group(1)} {match.group(2)}"


def written_by_commbench(text: str) -> tuple[str, str] | None:
    """(backend, device) of a log `commbench perf` printed (its first line says so, its rank lines say [cpu] on CPU
    ranks); None for nccl-tests' own logs, which ran NCCL on CUDA."""
    lines = text.splitlines()
    for line in lines[:50]:
        match = _COMMBENCH.match(_PREFIX.sub("", line, count=1).strip())
        if match:
            on_cpu = any((rank := _RANK.match(_PREFIX.sub("", other, count=1).strip())) and rank.group(6) == "cpu"
                         for other in lines[:200])
            return match.group(2), "cpu" if on_cpu else "cuda"
    return None


def _table_without_header(current: _Open | None, line: str) -> bool:
    return (current is None or current.closed) and _column_header(line) is not None


def _column_header(line: str) -> list[str] | None:
    stripped = line.strip()
    tokens = stripped.lstrip("#").split() if stripped.startswith("#") else []
    return tokens if tokens[:1] in (["size"], ["bytes"]) and "type" in tokens else None


def _open_test(line: str, number_: int, match: re.Match[str] | None, named: str | None, collective: str | None,
               where: str) -> _Open:
    settings = dict.fromkeys(("nthreads", "ngpus", "min_bytes", "max_bytes", *_SETTINGS))
    if match is not None:
        settings.update(nthreads=int(match.group(1)), ngpus=int(match.group(2)), min_bytes=int(match.group(3)),
                        max_bytes=int(match.group(4)))
        for key, pattern in _SETTINGS.items():
            found = pattern.search(line)
            settings[key] = int(found.group(1)) if found else None
    if named is not None:
        name = names.NCCL_TESTS_COLLECTIVES[named]
        if collective is not None and collective != name:
            raise CommbenchError(f"{where}: --collective {collective} but the file names {named}_perf for this "
                                 "table; drop --collective (the file's name is used)")
        program = f"{named}_perf"
    elif collective is not None:
        name, program = collective, f"{collective} (--collective)"
    else:  # inferred once the table is read (infer.py): from busbw ÷ algbw and the redop and root columns
        name, program = infer.UNKNOWN, "unnamed nccl-tests"
    test = ImportedTest(program=program, line=number_, header=line.strip() if match is not None else None)
    test.closing["collective"] = name
    test.closing["named"] = named is not None
    return _Open(test, settings)


def _read_line(current: _Open, line: str, where: str) -> None:
    stripped = line.strip()
    test = current.test
    if (match := _RANK.match(stripped)) is not None:
        test.ranks.append(_rank(match))
    elif (match := _OUT_OF_BOUNDS.match(stripped)) is not None:
        test.closing["out_of_bounds"] = int(match.group(1))
        test.closing["out_of_bounds_line"] = stripped
    elif (match := _AVERAGE.match(stripped)) is not None:
        _check_average(current, match.group(1), stripped, where)
    elif (tokens := _column_header(stripped)) is not None:
        current.layout = _layout(tokens, where)
    elif stripped.startswith("#") and stripped.lstrip("#").split()[:1] == ["(B)"] and current.layout is not None:
        current.layout.ms = "(ms)" in stripped
    elif _ROW.match(line):
        if current.layout is None:
            raise CommbenchError(f"{where}: a result row before any column header line ('#  size  count  type …'); "
                                 "the log was cut or edited: import the whole log")
        _read_row(current, line.split(), where)


def _rank(match: re.Match[str]) -> dict[str, object]:
    return {"rank": int(match.group(1)), "host": match.group(4), "device": int(match.group(5)), "bus": match.group(6),
            "gpu": match.group(7)}


def _layout(tokens: list[str], where: str) -> _Layout:
    starts = [index for index, token in enumerate(tokens) if token in _TIME_COLUMNS]
    if len(starts) != 2 or not all(token in tokens for token in ("algbw", "busbw")):
        raise CommbenchError(f"{where}: a column header this importer does not know ({' '.join(tokens)}); it reads "
                             "nccl-tests' out-of-place and in-place groups of time, algbw and busbw")
    last = [token for token in tokens[starts[1]:] if token != "timestamp"]
    layout = _Layout(tokens[:starts[0]], [tokens[starts[0]:starts[1]], last])
    layout.ms = tokens[0] == "bytes"  # the 2017 layout: no units line, times in ms (deltaSec × 1e3)
    return layout


def _read_row(current: _Open, fields: list[str], where: str) -> None:
    layout, test, settings = current.layout, current.test, current.settings
    assert layout is not None  # _read_line reads a row only after a column header
    if len(fields) < layout.width:
        raise CommbenchError(f"{where}: a table row cut short ({len(fields)} of {layout.width} fields); the log "
                             "was truncated or edited: import the whole log")
    key = dict(zip(layout.key, fields))
    collective = test.closing["collective"]
    if "started" not in test.closing and (stamp := nccl_tests_time(" ".join(fields[layout.width:]))) is not None:
        test.closing.update(started=stamp, started_from=STARTED_FROM)
    size = int(key["size"] if "size" in key else key["bytes"])  # a column header starts with size (2017: bytes)
    offset = len(layout.key)
    for inplace, group in zip((False, True), layout.groups):
        values = dict(zip(group, fields[offset:offset + len(group)]))
        offset += len(group)
        if values[_time_column(group)] == NOT_MEASURED:  # commbench perf: torch has no such placement
            continue
        time_text = _microseconds(values[_time_column(group)], layout.ms)
        n_wrong, note = _wrong(values)
        more = {"time_us_mean": number(time_text)}  # nccl-tests' time is a mean per call over one batch
        if "i_min" in values:
            more.update(time_us_min=number(values["i_min"]), time_us_max=number(values["i_max"]))
        redop = key.get("redop", key.get("op", ""))
        infer.remember_columns(test, redop=redop, root=key.get("root"))
        test.rows.append(ImportedRow(
            collective=collective, size_bytes=size, count=int(cast(str, key.get("count", key.get("N")))),
            dtype=names.nccl_tests_dtype(key["type"]),
            op=names.nccl_tests_op(collective, redop),
            inplace=inplace, time_us=number(time_text), algbw_gbps=number(values["algbw"]),
            busbw_gbps=number(values["busbw"]), n_wrong=n_wrong,
            printed={"time_us": time_text, "busbw_gbps": values["busbw"]},
            calls_per_sample=_calls(settings), iters=1, warmup=settings["warmup"], more_times_us=more, note=note))
        current.busbw_texts.append(values["busbw"])


def _time_column(group: list[str]) -> str:
    return next(name for name in group if name in _TIME_COLUMNS)


def _microseconds(text: str, ms: bool) -> str:
    """A printed time in microseconds, keeping its printed precision (Decimal.scaleb moves the point only)."""
    if not ms:
        return text
    try:
        return str(Decimal(text).scaleb(3))
    except ArithmeticError:
        return text


def _wrong(values: dict) -> tuple[int | None, str]:
    name = next((column for column in _WRONG_COLUMNS if column in values), None)
    if name is None:
        return None, ""
    value = values[name]
    if name != "#wrong":
        return None, (f"nccl-tests' older check printed the largest deviation ({name} {value}), not a count of "
                      "wrong elements")
    parsed = number(value)
    return (int(parsed), "") if parsed == parsed else (None, "not checked (#wrong N/A)")


def _calls(settings: dict) -> int | None:
    if settings["iters"] is None:
        return None
    return settings["iters"] * (settings["agg_iters"] or 1)


def _check_average(current: _Open, printed: str, line: str, where: str) -> None:
    """nccl-tests' average is the mean busbw of every row of the table, out-of-place and in-place alike."""
    closing = current.test.closing
    closing["avg_busbw_gbps"] = number(printed)
    closing["avg_busbw_line"] = line
    current.closed = True
    mean, agrees = mean_agrees(current.busbw_texts, printed)
    closing["avg_busbw_gbps_from_rows"] = mean
    if current.busbw_texts and not agrees:
        raise CommbenchError(f"{where}: '# Avg bus bandwidth : {printed}' does not match the table above it (its "
                             f"rows average {mean:.6g} GB/s); rows are missing or were edited: import the whole log")


def _close(current: _Open, where: str, partial: bool, tests: list) -> None:
    test = current.test
    if not test.rows:
        return  # a test that printed no row (it failed at start-up): nothing to import
    if test.closing.get("avg_busbw_gbps") is None and not partial:
        raise CommbenchError(f"{where}: the {test.program} table (from line {test.line}) ends without nccl-tests' "
                             "closing '# Avg bus bandwidth' line, so the log was cut; import the whole log, or pass "
                             "--partial to keep the rows it has")
    if test.closing.get("avg_busbw_gbps") is None:
        test.closing["partial"] = "the table ends without its closing lines; the rows it has were kept"
    tests.append(test)


def _set_world_sizes(tests: list[ImportedTest], file_name: str, world_size: int | None) -> None:
    found: set[int] = set()
    for test in tests:
        ranks = {rank["rank"] for rank in test.ranks}
        if ranks and world_size is not None and len(ranks) != world_size:
            raise CommbenchError(f"{file_name}: --world-size {world_size} but the {test.program} table lists "
                                 f"{len(ranks)} ranks; drop --world-size (the file's ranks are used)")
        if not ranks and world_size is None:
            raise CommbenchError(f"{file_name}: the {test.program} table (line {test.line}) has no '#  Rank N … on "
                                 "HOST device D' lines to tell the world size; pass --world-size N")
        world = len(ranks) or world_size
        assert world is not None  # no ranks and no --world-size raised above
        test.world_size = world
        found.add(world)
    sizes = sorted(found)
    if len(sizes) > 1:
        raise CommbenchError(f"{file_name} mixes world sizes ({', '.join(map(str, sizes))} ranks) in one file; a run "
                             "has one world size: split the file and import each part into its own run")
