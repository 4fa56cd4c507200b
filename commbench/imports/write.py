"""An import as a normal run folder of the collective kind: meta.json (kind collective, source = the tool, its
version, each file's name and sha256, the tests' header and closing lines), results.csv with the kind's columns,
and samples.csv only where the source recorded per-iteration times. report, fit, compare and the gate read it as
they read a sweep."""

import math
import shlex
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import commbench
from commbench import store
from commbench.benches.collective import KIND
from commbench.errors import CommbenchError
from commbench.expect.rows import RunExpectation
from commbench.imports.model import ImportedFile, ImportedRow, ImportedTest
from commbench.names import BATCH, BUILTIN
from commbench.runinfo import utc_now
from commbench.schema import common
from commbench.sweep.table_averages import SOURCE_AVERAGE, SOURCE_AVERAGE_RESULTS

STOP_REASON = "imported"
StartFrom = Literal["log", "import"]
"""meta.json's start_time_source: start_time is the time the files record of their run, or (where they record
none) when they were imported; imported_at is always the latter, and end_time too (commbench export's run end)."""
START_FROM_LOG: StartFrom = "log"
START_FROM_IMPORT: StartFrom = "import"
Factor = Callable[[str, int], float | None]
"""(collective, world size) → the tool's busbw factor, or None where the size alone does not give it."""
ENV = "env"
COLUMNS = KIND.result_columns if ENV in KIND.result_columns else (*KIND.result_columns, ENV)
"""The kind's columns, with `env` (the label of --env) added where the kind does not list it yet: every imported
row says the environment it was measured under, "" for the default one."""


def write_run(files: list[ImportedFile], *, out: Path, run_id: str | None, factor: Factor,
              expectation: RunExpectation, env: str = "") -> Path:
    """factor(collective, world) → the busbw factor, or None: the bytes each rank sends under the ring model;
    expectation: the expected busbw of each collective on the machine that wrote the files (commbench expect);
    env: the label of the environment the files were measured under (--env), every row's `env`."""
    world = one_world(files)
    tool = files[0].tool
    run_dir = store.create_run_dir(out, run_id, prefix=f"import-{tool}-")
    try:
        rows, samples = [], []
        for imported in files:
            for test in imported.tests:
                for row in test.rows:
                    rows.append({**_row(row, imported, world, run_dir.name, factor, expectation, env),
                                 **_test_average(test)})
                    samples += [{**_keys(rows[-1]), "schema_version": store.SCHEMA_VERSION,
                                 "run_id": run_dir.name, "iteration": iteration, "time_us": time_us}
                                for iteration, time_us in enumerate(row.samples_us)]
        store.write_rows(run_dir / store.RESULTS_FILE, (*COLUMNS, *_own_names(rows)), rows)
        if samples:
            store.write_rows(run_dir / store.SAMPLES_FILE, KIND.sample_columns, samples)
        store.write_meta(run_dir, {**_meta(files, world, run_dir.name, env), "expectation": expectation.document})
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)  # a half-written import is worth nothing; its files are intact
        raise
    return run_dir


def one_world(files: list[ImportedFile]) -> int | None:
    sizes = {test.world_size for imported in files for test in imported.tests}
    if len(sizes) > 1:
        by_file = "; ".join(f"{imported.name}: {imported.tests[0].world_size}" for imported in files)
        raise CommbenchError(f"the files hold different world sizes ({by_file}); a run has one world size: import "
                             "each world size into its own run")
    tools = {imported.tool for imported in files}
    if len(tools) > 1:
        raise CommbenchError(f"the files come from different tools ({', '.join(sorted(tools))}); import each tool's "
                             "files into their own run")
    return sizes.pop()


def _row(row: ImportedRow, imported: ImportedFile, world: int | None, run_id: str, factor: Factor,
         expectation: RunExpectation, env: str) -> dict:
    assert world is not None  # a file's parser refuses a test without a world size (no ranks, no --world-size)
    busbw_factor = factor(row.collective, world)
    values = {
        "schema_version": store.SCHEMA_VERSION, "run_id": run_id, "bench": KIND.name, "collective": row.collective,
        "impl": BUILTIN,  # nccl-tests and PARAM time the library's own call (ncclAllReduce, dist.all_reduce)
        "backend": imported.backend, "device": imported.device, common.WORLD_SIZE: world,
        "dtype": row.dtype, "op": row.op, "inplace": row.inplace, common.SIZE_BYTES: row.size_bytes, "timing": BATCH,
        "count": row.count, "iters": row.iters, "warmup": row.warmup, "stop_reason": STOP_REASON,
        common.TIME_US_P50: row.time_us, common.ALGBW_GBPS: row.algbw_gbps, common.BUSBW_GBPS: row.busbw_gbps,
        "bytes_sent_per_rank": busbw_factor * row.size_bytes if busbw_factor is not None else None,
        "bytes_source": "model" if busbw_factor is not None else None, common.N_WRONG: row.n_wrong,
        "calls_per_sample": row.calls_per_sample, "timing_method": imported.timing_method, "note": row.note,
        "source": imported.tool, "source_file": imported.name, "busbw_check": row.busbw_check,
        **row.more_times_us, **expectation.columns(row.collective), ENV: env, **_own(row),
    }
    return {column: _cell(values.get(column)) for column in (*COLUMNS, *_own(row))}


def _test_average(test: ImportedTest) -> dict:
    """The `# Avg bus bandwidth` the row's test printed and how many results it averages (nccl-tests' figure, over
    unrounded busbw: the tables print it, not the mean of the rounded rows); nothing where the test printed none."""
    printed = test.closing.get("avg_busbw_gbps")
    if printed is None or not math.isfinite(printed):
        return {}
    return {SOURCE_AVERAGE: printed, SOURCE_AVERAGE_RESULTS: len(test.rows)}


def _own(row: ImportedRow) -> dict:
    """The columns a source's rows set beyond the common ones: an ImportedRow subclass's own_columns() (the NCCL
    Inspector's algo_proto, communicator and rank, and its per-call timing mode)."""
    own = getattr(row, "own_columns", None)
    return own() if callable(own) else {}


def _own_names(rows: list[dict]) -> list[str]:
    return [column for column in dict.fromkeys(column for row in rows for column in row) if column not in COLUMNS]


def _cell(value: object) -> object:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _keys(row: dict) -> dict:
    return {column: row[column] for column in KIND.sample_keys}


def _meta(files: list[ImportedFile], world: int | None, run_id: str, env: str) -> dict:
    hosts = hosts_of(files)
    ranks = [rank for imported in files for test in imported.tests[:1] for rank in test.ranks]
    gpus = Counter(rank.get("gpu") for rank in ranks if rank.get("gpu"))
    first = files[0]
    source = {
        "tool": first.tool,
        "files": [{"name": imported.name, "sha256": imported.sha256, "version": imported.version,
                   "tests": [{"program": test.program, "line": test.line, "header": test.header,
                              common.WORLD_SIZE: test.world_size, "rows": len(test.rows), **_closing(test.closing)}
                             for test in imported.tests],
                   "notes": imported.notes} for imported in files],
        "timing_method": first.timing_method,
        "env": env,  # the --env label the rows carry ("" = the environment the tool was started in, unstated)
    }
    versions = sorted({imported.version for imported in files if imported.version})
    now = utc_now()
    started, started_from = log_start(files)
    source["start_time"] = started_from
    return {
        "schema_version": store.SCHEMA_VERSION, "kind": KIND.name, "run_id": run_id,
        "status": store.STATUS_COMPLETE, "reason": None,
        "command_line": shlex.join(["commbench", *sys.argv[1:]]),
        "start_time": started or now, "start_time_source": START_FROM_LOG if started else START_FROM_IMPORT,
        "imported_at": now, "end_time": now,
        "commbench_version": commbench.__version__,
        "backend": first.backend, "device_type": first.device, common.WORLD_SIZE: world, "hosts": hosts,
        "device_names": [f"{count} x {name}" for name, count in gpus.items()],
        "backend_version": ", ".join(versions) if versions else None,
        "imported_from": f"{first.tool}: " + ", ".join(f"{imported.name} (sha256 {imported.sha256[:12]})"
                                                       for imported in files),
        "source": source,
    }


def log_start(files: list[ImportedFile]) -> tuple[str | None, str]:
    """When the imported run started, as its files record it: the earliest time a test of theirs names (ISO 8601)
    and what that time is; (None, why) where no file records one (nccl-tests' text without -S 1, PARAM)."""
    timed = sorted((test.closing["started"], imported.name, test.closing.get("started_from", ""))
                   for imported in files for test in imported.tests if test.closing.get("started"))
    if not timed:
        return None, "the files record no time of their run: start_time is when they were imported"
    started, name, what = timed[0]
    return started, f"{name}: {what}"


def hosts_of(files: list[ImportedFile]) -> list[str]:
    """The hosts the files' rank lines name, in order (none for files without rank lines)."""
    ranks = [rank for imported in files for test in imported.tests[:1] for rank in test.ranks]
    return list(dict.fromkeys(rank["host"] for rank in ranks))


def _closing(closing: dict) -> dict:
    return {key: value for key, value in closing.items() if key != "collective"}
