"""Every reader of stored runs and traces (report, compare on either side, fit, `model comm --from`, trace analyze)
fed real files, damaged: each refusal is exit 2 with one line on stderr that names the file, and no traceback. For
compare this also proves that exit 1 never stands for bad input.

The readers share commbench/store.py's functions, so a damage is tested once per rule and once per place: PLACES
damages each file and folder a reader reads, for every reader (its own way to the file); RULES holds each rule of
the shared readers once (each kind of damage to any file, to a CSV row, to a numeric cell, to meta.json, to a suite's
list of benches); the trace table holds each check of the trace reader once, and its second way in once or twice.

The inputs are real: a copy of the committed CI baseline's first launch (a suite run of a collective sweep at two
sizes) and a real GPU trace, damaged in place. A new reader or a new kind of damage is one line in a table.
"""

import functools
import gzip
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from commbench.store import NUMERIC_COLUMNS
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

REPO = Path(__file__).parent.parent
BASELINE = REPO / "results" / "baselines" / "cpu-ci"
SUITE_RUN = BASELINE / "launch1"
TRACE = REPO.parent / "shared" / "data" / "traces" / "gpu" / "sendrecv-128rank-rank0.json.gz"

SUITE_META, BENCH_META, RESULTS, SAMPLES = "meta.json", "gate/meta.json", "gate/results.csv", "gate/samples.csv"
RUN_FOLDER, BENCH_FOLDER = ".", "gate"
JUNK = bytes(range(256)) * 4  # NUL, control bytes and invalid UTF-8


# --- damage to any file -------------------------------------------------------------------------------------------

def _binary_junk(path: Path) -> None:
    path.write_bytes(JUNK)


def _latin1(path: Path) -> None:
    """A non-ASCII character saved as Latin-1 (an editor's or another tool's encoding), not UTF-8."""
    text = path.read_text(encoding="utf-8")
    assert "gloo" in text  # every file of the gloo run names its backend
    path.write_bytes(text.replace("gloo", "glöö", 1).encode("latin-1"))


def _emptied(path: Path) -> None:
    path.write_bytes(b"")


def _folder_instead(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
    path.mkdir()
    (path / "stray.txt").write_text("x")


def _file_instead(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("not a folder\n")


# --- damage to a CSV file: the first data row (line 2) ------------------------------------------------------------

def _edit_line_2(path: Path, change: Callable[[list[str], list[str]], list[str]]) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    lines[1] = ",".join(change(header, _fields(lines[1])))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _fields(line: str) -> list[str]:
    import csv

    return next(csv.reader([line]))


def _quoted(fields: list[str]) -> list[str]:
    return [f'"{field}"' if "," in field else field for field in fields]


def _set_cell(column: str, value: str):
    def change(header, fields):
        fields[header.index(column)] = value
        return _quoted(fields)
    return change


def _extra_field(path: Path) -> None:
    _edit_line_2(path, lambda header, fields: _quoted(fields) + ["surplus"])


def _missing_field(path: Path) -> None:
    _edit_line_2(path, lambda header, fields: _quoted(fields[:-1]))


def _cell(column: str, value: str):
    return lambda path: _edit_line_2(path, _set_cell(column, value))


# --- damage to a meta.json ----------------------------------------------------------------------------------------

def _edit_meta(change: Callable[[dict], object]):
    def damage(path: Path) -> None:
        meta = json.loads(path.read_text(encoding="utf-8"))
        result = change(meta)
        path.write_text(json.dumps(meta if result is None else result), encoding="utf-8")
    return damage


def _set_field(name: str, value):
    return _edit_meta(lambda meta: meta.__setitem__(name, value))


def _half(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")


@dataclass(frozen=True)
class Damage:
    name: str
    target: str
    """The path inside the suite run it damages."""
    apply: Callable[[Path], None]
    fragment: str = ""
    """What the refusal must say besides the damaged file's name (e.g. its line)."""


ANY_FILE = {"binary junk": _binary_junk, "latin-1": _latin1, "empty": _emptied, "a folder": _folder_instead}
CSV_ROW = {"extra field": (_extra_field, "line 2"), "missing field": (_missing_field, "line 2"),
           "schema_version x": (_cell("schema_version", "x"), "line 2"),
           "schema_version empty": (_cell("schema_version", ""), "line 2"),
           "schema_version 2.5": (_cell("schema_version", "2.5"), "line 2 has schema_version 2.5"),
           "world_size empty": (_cell("world_size", ""), "line 2 has no world_size"),
           "size_bytes empty": (_cell("size_bytes", ""), "line 2 has no size_bytes")}
META = {"a JSON array": _edit_meta(lambda meta: [meta]), "schema_version x": _set_field("schema_version", "x"),
        "schema_version true": _set_field("schema_version", True), "kind a list": _set_field("kind", ["collective"]),
        "status a number": _set_field("status", 3), "run_id an object": _set_field("run_id", {"id": 1})}
SUITE_BENCHES = {"benches a string": "gate", "benches without names": [{"kind": "sweep"}],
                 "a bench outside the run": [{"name": "../launch2/gate", "kind": "sweep"}],
                 "a bench path that starts like a name": [{"name": "gate/../../launch2/gate", "kind": "sweep"}],
                 "benches of numbers": [1, 2]}
BAD_NUMBERS = ["fast", "n/a", "1e", "0x10", "--", "½", "16M", "1,5"]
"""What a person or another tool might leave in a numeric cell: each a spelling that pandas or float() might take."""
RESULT_NUMBERS = [column for column in NUMERIC_COLUMNS
                  if column in (SUITE_RUN / RESULTS).read_text().split("\n", 1)[0].split(",")]

RULES = [
    # read_text: not UTF-8 (junk, or Latin-1 text), a folder where a file belongs; read_meta: an empty file
    *(Damage(f"{BENCH_META} {name}", BENCH_META, apply) for name, apply in ANY_FILE.items()),
    # read_rows: no header, the field count, the numbers, the keys that are never empty, the schema version
    Damage(f"{RESULTS} empty", RESULTS, _emptied),
    *(Damage(f"{RESULTS} {name}", RESULTS, apply, fragment) for name, (apply, fragment) in CSV_ROW.items()),
    *(Damage(f"{RESULTS} {column}={bad!r}", RESULTS, _cell(column, bad), f"line 2, column {column}")
      for column, bad in zip([column for column in RESULT_NUMBERS if column != "schema_version"], BAD_NUMBERS)),
    # read_meta: not an object, the schema version (text, and a boolean, which is an int to Python), each field's type
    *(Damage(f"{BENCH_META} {name}", BENCH_META, apply) for name, apply in META.items()),
    # suite_bench_dirs: the list of benches, whose names must be bench folders' names (never a path elsewhere)
    *(Damage(f"{SUITE_META} {name}", SUITE_META, _set_field("benches", value), "benches")
      for name, value in SUITE_BENCHES.items()),
]
"""Each rule of the readers of commbench/store.py once, on the file it is about, read by one reader (fit for a
bench's files, report for the suite's meta.json): they share those functions."""


@dataclass(frozen=True)
class Reader:
    name: str
    args: Callable[[Path, Path], list[str]]
    """The command line, given the damaged suite run and a scratch folder."""
    reads: frozenset
    """The paths inside the suite run it reads (damage elsewhere goes unnoticed, rightly)."""


GATE = ("--fail", "busbw:40%")  # wide enough that one launch of the committed baseline passes against the set
EVERY_FILE = frozenset({RUN_FOLDER, SUITE_META, BENCH_FOLDER, BENCH_META, RESULTS, SAMPLES})
BENCH_FILES = frozenset({BENCH_FOLDER, BENCH_META, RESULTS})
READERS = [
    Reader("report", lambda run, scratch: ["report", str(run), "--out", str(scratch / "plots")],
           EVERY_FILE - {SAMPLES}),
    Reader("compare (new side)", lambda run, scratch: ["compare", str(BASELINE), str(run), *GATE], EVERY_FILE),
    Reader("compare (baseline side)", lambda run, scratch: ["compare", str(run), str(SUITE_RUN), *GATE],
           EVERY_FILE),
    Reader("fit", lambda run, scratch: ["fit", str(run / "gate")], BENCH_FILES),
    Reader("model comm --from", lambda run, scratch: ["model", "comm", "--params", "1B", "--ranks", "8", "--from",
                                                     str(run / "gate")], BENCH_FILES),
]
PLACES = {RUN_FOLDER: ("a file", _file_instead), BENCH_FOLDER: ("a file", _file_instead),
          SUITE_META: ("invalid JSON", _half), BENCH_META: ("invalid JSON", _half),
          RESULTS: ("busbw_gbps='fast'", _cell("busbw_gbps", "fast")),
          SAMPLES: ("time_us='fast'", _cell("time_us", "fast"))}
"""One damage per file or folder, that each reader meets on its own way to it: every reader is refused at every place
it reads (a folder that is a file, meta.json that is not JSON, a CSV with a cell that is no number)."""
RULE_READER = {BENCH_META: "fit", RESULTS: "fit", SUITE_META: "report"}
CASES = [pytest.param(reader, Damage(f"{target} {name}", target, apply), id=f"{reader.name}: {target} {name}")
         for reader in READERS for target, (name, apply) in PLACES.items() if target in reader.reads]
CASES += [pytest.param(reader, damage, id=f"{reader.name}: {damage.name}") for damage in RULES
          for reader in READERS if reader.name == RULE_READER[damage.target]]


def _damaged_copy(tmp_path: Path, damage: Damage) -> Path:
    run = tmp_path / "launch1"
    shutil.copytree(SUITE_RUN, run)
    damage.apply(run / damage.target)
    return run


@pytest.mark.parametrize("reader", [reader for reader in READERS if reader.name != "report"],
                         ids=lambda reader: reader.name)
def test_each_reader_accepts_the_undamaged_run(reader, tmp_path):
    """The control: without damage every reader succeeds, so the refusals below are the damage's doing."""
    run = tmp_path / "launch1"
    shutil.copytree(SUITE_RUN, run)
    result = invoke(reader.args(run, tmp_path))
    assert result.exit_code == 0, result.output + result.stderr


def test_report_reads_the_undamaged_run(tmp_path):
    """The report's control, its reading half only: drawing the plots takes seconds (test_report_compare draws)."""
    from commbench.report.render import load_runs

    run = tmp_path / "launch1"
    shutil.copytree(SUITE_RUN, run)
    [loaded] = load_runs([run])
    assert loaded.name == "launch1/gate" and len(loaded.results) == 2


@pytest.mark.parametrize(("reader", "damage"), CASES)
def test_a_damaged_run_is_refused_in_one_line_naming_the_file(reader, damage, tmp_path):
    run = _damaged_copy(tmp_path, damage)
    line = assert_refused(invoke(reader.args(run, tmp_path)), fragment=damage.fragment or None)
    named = run / damage.target if damage.target != RUN_FOLDER else run
    assert str(named.resolve()) in line or str(named) in line, line
    if reader.name == "report":
        assert not (tmp_path / "plots").exists()  # refused before drawing anything


def test_the_tables_cover_every_reader_at_every_place_and_every_damage():
    """Every reader at every file and folder it reads; every damage of the tables above as a rule once."""
    cases = [case.values for case in CASES]
    for reader in READERS:
        assert {damage.target for named, damage in cases if named is reader} == reader.reads, reader.name
    names = {damage.name for _, damage in cases}
    for target, damages in ((BENCH_META, [*ANY_FILE, *META]), (RESULTS, CSV_ROW)):
        assert {f"{target} {name}" for name in damages} <= names
    assert {f"{SUITE_META} {name}" for name in SUITE_BENCHES} <= names
    assert sum(", column " in damage.fragment for damage in RULES) == len(BAD_NUMBERS)  # each spelling, once


# --- traces -------------------------------------------------------------------------------------------------------

@functools.cache
def _trace_text() -> str:
    """The real trace, cut to its first events and its NCCL kernels: every damage is refused while the file loads,
    and a short file keeps each case fast."""
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is absent (a clone without ../shared/data)")
    document = json.loads(gzip.decompress(TRACE.read_bytes()))
    events = document["traceEvents"]
    kernels = [event for event in events[400:] if "ncclKernel" in str(event.get("name", ""))]
    return json.dumps({**document, "traceEvents": events[:400] + kernels})


def _trace_document() -> dict:
    return json.loads(_trace_text())


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "rank1.json"
    path.write_text(_trace_text(), encoding="utf-8")
    return path


def _first_timed(document: dict) -> dict:
    return next(event for event in document["traceEvents"]
                if isinstance(event, dict) and "dur" in event and event.get("cat") not in (None, "Trace"))


def _first_with_args(document: dict) -> dict:
    return next(event for event in document["traceEvents"]
                if isinstance(event, dict) and "dur" in event and isinstance(event.get("args"), dict)
                and event.get("cat") not in (None, "Trace"))


def _event(field: str, value, pick=_first_timed):
    def change(document):
        pick(document)[field] = value
    return change


def _event_arg(name: str, value):
    def change(document):
        _first_with_args(document)["args"][name] = value
    return change


def _top(field: str, value):
    return lambda document: document.__setitem__(field, value)


def _info(field: str, value):
    return lambda document: document["distributedInfo"].__setitem__(field, value)


def _untimed(document):
    for event in document["traceEvents"]:
        if isinstance(event, dict):
            event.pop("dur", None)


TRACE_EDITS = {  # name → (change to the parsed document, what the refusal must say)
    "ts 'abc'": (_event("ts", "abc"), "traceEvents["), "dur NaN": (_event("dur", float("nan")), "dur nan"),
    "dur Infinity": (_event("dur", float("inf")), "dur inf"), "dur '12'": (_event("dur", "12"), "dur '12'"),
    "dur negative": (_event("dur", -5.0), "negative duration"), "ts NaN": (_event("ts", float("nan")), "ts nan"),
    "tid a list": (_event("tid", [1, 2]), "tid"), "args.stream '7'": (_event_arg("stream", "7"), "args.stream"),
    "args.correlation 1.5": (_event_arg("correlation", 1.5), "args.correlation"),
    "In msg nelems 'many'": (_event_arg("In msg nelems", "many"), "In msg nelems"),
    "distributedInfo a list": (_top("distributedInfo", [0, 128]), "distributedInfo"),
    "distributedInfo rank 'abc'": (_info("rank", "abc"), "distributedInfo.rank"),
    "distributedInfo world_size -1": (_info("world_size", -1), "distributedInfo.world_size"),
    "distributedInfo backend 5": (_info("backend", 5), "distributedInfo.backend"),
    "traceEvents an object": (_top("traceEvents", {"0": {}}), "traceEvents"),
    "a JSON array": (lambda document: [document], "traceEvents"),
    "no timed events": (_untimed, "no timed events"),
}


def _write_edited(path: Path, change) -> None:
    document = _trace_document()
    result = change(document)
    path.write_text(json.dumps(document if result is None else result), encoding="utf-8")  # NaN/Infinity as JSON


def _truncated_gzip(path: Path) -> None:
    data = TRACE.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _latin1_trace(path: Path) -> None:
    path.write_bytes(json.dumps({"traceEvents": [], "note": "glöö"}, ensure_ascii=False).encode("latin-1"))


TRACE_FILES = {  # name → writes the damaged file
    **{name: (lambda path, change=change: _write_edited(path, change)) for name, (change, _) in TRACE_EDITS.items()},
    "binary junk": lambda path: path.write_bytes(JUNK), "latin-1": _latin1_trace,
    "empty": lambda path: path.write_bytes(b""), "truncated gzip": _truncated_gzip,
}
TRACE_FRAGMENTS = {name: fragment for name, (_, fragment) in TRACE_EDITS.items()}
TRACE_READERS = {
    "analyze": lambda bad, good: ["trace", "analyze", str(bad)],
    "analyze --json, a good rank first": lambda bad, good: ["trace", "analyze", "--json", str(good), str(bad)],
}


TRACE_CASES = [*(("analyze", damage) for damage in TRACE_FILES),
               ("analyze --json, a good rank first", "dur NaN"), ("analyze --json, a good rank first", "binary junk")]
"""Every damage (each a check of its own in the trace reader) through `trace analyze`; the other way in, a bad rank
after a good one, once for a damaged event and once for a file that is no JSON."""


@pytest.mark.parametrize("reader, damage", TRACE_CASES)
def test_a_damaged_trace_is_refused_in_one_line_naming_the_file(reader, damage, good_trace, tmp_path):
    bad = tmp_path / ("rank0.json.gz" if damage == "truncated gzip" else "rank0.json")
    TRACE_FILES[damage](bad)
    line = assert_refused(invoke(TRACE_READERS[reader](bad, good_trace)), fragment=TRACE_FRAGMENTS.get(damage))
    assert str(bad) in line, line


def test_the_undamaged_trace_is_analysed(good_trace, tmp_path):
    """The control for the trace table: the real trace, cut and re-written as the damaged ones are, reads fine."""
    same = tmp_path / "rank0.json"
    _write_edited(same, lambda document: None)
    result = invoke(["trace", "analyze", str(good_trace), str(same), "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    original, rewritten = json.loads(result.stdout)["traces"]
    assert {**original, "path": None} == {**rewritten, "path": None}  # read alike: only the damage tells them apart
    assert original["rank"] == 0 and original["world_size"] == 128 and original["backend"] == "nccl"


def test_fit_that_cannot_write_its_output_is_refused_in_one_line(tmp_path):
    run = tmp_path / "launch1"
    shutil.copytree(SUITE_RUN, run)
    (run / "gate" / "fit.csv").mkdir()  # where fit.csv goes
    assert_refused(invoke(["fit", str(run / "gate")]), fragment="cannot write the fits")
