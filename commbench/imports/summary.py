"""What `commbench import` says about an import: per test its rows and closing lines and how they checked, how many
busbw figures follow from size and time, and whether the source reports wrong results (exit code 1)."""

from collections import Counter
from pathlib import Path

from commbench import store
from commbench.benches.collective import KIND
from commbench.errors import ExitCode
from commbench.imports.figures import AGREES, NOT_RECOMPUTED
from commbench.imports.model import ImportedFile, ImportedTest
from commbench.imports.write import START_FROM_LOG


def wrong_reports(files: list[ImportedFile]) -> list[str]:
    """What the sources themselves flag: rows with wrong elements, and closing lines with out-of-bounds values."""
    found = []
    for imported in files:
        for test in imported.tests:
            wrong = sum(row.n_wrong or 0 for row in test.rows)
            if wrong:
                found.append(f"{imported.name} {test.program}: {wrong} wrong element(s) in its #wrong columns")
            elif test.closing.get("out_of_bounds"):
                found.append(f"{imported.name} {test.program}: '# Out of bounds values : "
                             f"{test.closing['out_of_bounds']} FAILED'")
    return found


def exit_code(files: list[ImportedFile]) -> int:
    return ExitCode.WRONG_RESULTS if wrong_reports(files) else ExitCode.OK


def _checks(files: list[ImportedFile]) -> Counter:
    return Counter("agrees" if row.busbw_check == AGREES else
                   "not recomputed" if row.busbw_check.startswith(NOT_RECOMPUTED) else "differs"
                   for imported in files for test in imported.tests for row in test.rows)


def _test_line(imported: ImportedFile, test: ImportedTest) -> str:
    where = f" (line {test.line})" if test.line else ""
    text = f"# {imported.name}{where}: {test.program}, {len(test.rows)} rows"
    closing = test.closing
    if closing.get("avg_busbw_gbps") is not None:
        text += (f"; Avg bus bandwidth {closing['avg_busbw_gbps']:g} GB/s, the rows' mean "
                 f"{closing['avg_busbw_gbps_from_rows']:.6g} reproduces it")
    if closing.get("out_of_bounds") is not None:
        text += f"; Out of bounds values {closing['out_of_bounds']}"
    if closing.get("partial"):
        text += f"; {closing['partial']}"
    return text


def _when(meta: dict) -> str:
    """When the run ran, where its files say so, and when it was imported: `# ran at T (FILE: what T is); imported at
    T2`, or `# imported at T2; the files record no time of their run`."""
    if meta.get("start_time_source") == START_FROM_LOG:
        return f"# ran at {meta['start_time']} ({meta['source']['start_time']}); imported at {meta['imported_at']}"
    return f"# imported at {meta['imported_at']}; the files record no time of their run (start_time is this time)"


def summary_lines(files: list[ImportedFile], run_dir: Path) -> dict[str, list[str]]:
    tests = [test for imported in files for test in imported.tests]
    ranks = tests[0].ranks
    hosts = list(dict.fromkeys(rank["host"] for rank in ranks))
    # a source that names no GPU (the NCCL Inspector) lists none
    gpus = Counter(name for rank in ranks if (name := rank.get("gpu") or rank.get("device")))
    where = f" on {len(hosts)} host(s) ({', '.join(hosts[:4])}{', …' if len(hosts) > 4 else ''})" if hosts else ""
    devices = f": {', '.join(f'{count} x {name}' for name, count in gpus.items())}" if gpus else ""
    out = [f"# {files[0].tool}: {len(tests)} table(s) from {len(files)} file(s), world size {tests[0].world_size}"
           f"{where}{devices}"]
    out.append(_when(store.read_meta(run_dir)))
    out += [_test_line(imported, test) for imported in files for test in imported.tests]
    checks = _checks(files)
    out.append(f"# busbw vs size / time x the collective's factor: {checks['agrees']} agree, {checks['differs']} "
               f"differ, {checks['not recomputed']} not recomputed (column busbw_check)")
    out.append(f"# timing: {files[0].timing_method}")
    env = store.read_meta(run_dir)["source"].get("env")
    if env:
        out.append(f"# env: every row is labelled {env} (--env)")
    out.append(KIND.table(store.read_results(run_dir, KIND)))
    err = [f"commbench: warning: {imported.name}: {note}" for imported in files for note in imported.notes]
    if checks["differs"]:
        err.append(f"commbench: warning: {checks['differs']} row(s) print a busbw that does not follow from their "
                   "size and time (see busbw_check): the source used another formula or the file was edited")
    err += [f"commbench: import: the source reports wrong results: {report}; its figures are not valid"
            for report in wrong_reports(files)]
    return {"out": out, "err": err}


def document(files: list[ImportedFile], run_dir: Path, code: int) -> dict:
    meta = store.read_meta(run_dir)
    return {"run_dir": run_dir, "exit_code": int(code), "tool": files[0].tool,
            **{key: meta.get(key) for key in ("start_time", "start_time_source", "imported_at")},
            "files": [{"name": imported.name, "sha256": imported.sha256, "version": imported.version,
                       "tests": [{"program": test.program, "rows": len(test.rows), "world_size": test.world_size,
                                  **test.closing} for test in imported.tests]} for imported in files],
            "busbw_check": dict(_checks(files)), "wrong": wrong_reports(files),
            "results": store.read_results(run_dir, KIND)}
