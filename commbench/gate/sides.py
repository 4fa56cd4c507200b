"""The two sides of a comparison: a run or a run set (a folder of run folders, e.g. from --launches N), each bench of
a suite run, their rows and samples, how each run ended, and which tools their rows come from (commbench import).

What the gate does with them is commbench/gate/compare.py."""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from commbench import store
from commbench.bench_kind import BenchKind
from commbench.errors import CommbenchError
from commbench.names import BUILTIN, COMMBENCH_SOURCE
from commbench.runs import kind_of


@dataclass
class Run:
    path: Path
    kind: BenchKind
    results: pd.DataFrame
    samples: pd.DataFrame
    has_samples: bool = True
    """False for a run imported from a tool that records none (commbench import): its verdicts rest on the
    threshold alone."""


def run_folders(path: Path) -> list[Path]:
    """The run itself, or the run folders of a run set."""
    path = Path(path)
    if not path.exists():
        raise CommbenchError(f"{path} does not exist; pass a run folder or a run set, e.g. the one `commbench sweep "
                             f"--launches 3 --out {path.parent} --run-id {path.name}` writes")
    if path.is_file():
        raise CommbenchError(f"{path} is a file; pass a run folder (results/<run-id>) or a folder holding several")
    if (path / store.META_FILE).exists() or not path.is_dir():
        return [path]
    folders = sorted(child for child in path.iterdir() if (child / store.META_FILE).exists())
    if not folders:
        raise CommbenchError(f"{path} is neither a run folder (no meta.json) nor a folder of runs; pass "
                             "results/<run-id> or a folder holding several")
    return folders


PLAIN = ""  # the "bench name" of a run that is not a suite


def bench_run_sets(path: Path) -> dict[str, list[Path]]:
    """Run folders by bench: {PLAIN: runs} for a run or a set of runs, {bench: its folder in each suite run} for a
    suite run or a set of suite runs."""
    sets: dict[str, list[Path]] = {}
    for run_dir in run_folders(path):
        benches = store.suite_bench_dirs(run_dir) if run_dir.is_dir() else None
        for name, bench_dir in (benches or {PLAIN: run_dir}).items():
            sets.setdefault(name, []).append(bench_dir)
    if PLAIN in sets and len(sets) > 1:
        raise CommbenchError(f"{path} mixes suite runs (commbench run) with single runs; compare like with like")
    return sets


@dataclass(frozen=True)
class Pairing:
    """What compare joins: each side's run folders by bench, and, where one side is a suite run and the other a
    single run, the line that says which bench of the suite was taken."""

    baseline: dict[str, list[Path]]
    new: dict[str, list[Path]]
    chosen: str | None = None


def paired_bench_sets(baseline_dir: Path, new_dir: Path) -> Pairing:
    """bench_run_sets() of both sides, joined bench by bench. A suite run (or a set of them) against a single run (or
    a set of them): the suite's one bench of the single run's kind is compared with it (a bare `commbench sweep` is
    the default suite, of one collective bench, and `commbench perf` a single collective run); with none of that kind,
    or several, it is refused, naming the benches and the folder to pass instead."""
    base_sets, new_sets = bench_run_sets(baseline_dir), bench_run_sets(new_dir)
    if (PLAIN in base_sets) == (PLAIN in new_sets):
        return Pairing(base_sets, new_sets)
    suite_side, suite_dir, suite_sets, plain_dir, plain_sets = (
        ("baseline", baseline_dir, base_sets, new_dir, new_sets) if PLAIN in new_sets
        else ("new side", new_dir, new_sets, baseline_dir, base_sets))
    kind = kind_of(plain_sets[PLAIN][0])
    kinds = {name: _bench_kind(folders) for name, folders in suite_sets.items()}
    matching = [name for name, found in kinds.items() if found == kind.name]
    listed = ", ".join(f"{name} ({found or 'kind not recorded'})" for name, found in kinds.items()) or "none"
    if not matching:
        raise CommbenchError(f"cannot compare the suite run {suite_dir} with the {kind.name} run {plain_dir}: the "
                             f"suite holds no {kind.name} bench (its benches: {listed}); compare like with like")
    if len(matching) > 1:
        folders = ", ".join(str(suite_sets[name][0]) for name in matching)
        raise CommbenchError(f"the suite run {suite_dir} holds {len(matching)} {kind.name} benches "
                             f"({', '.join(matching)}) to compare with the single run {plain_dir}; pass the one you "
                             f"mean: {folders}")
    name = matching[0]
    launches = len(suite_sets[name])
    what = "a suite run" if launches == 1 else f"a run set of {launches} suite runs"
    chosen = (f"the {suite_side} {suite_dir} is {what}: its only {kind.name} bench, {name} "
              f"({suite_sets[name][0]}{' ...' if launches > 1 else ''}), is compared with {plain_dir}")
    paired = {PLAIN: suite_sets[name]}
    return Pairing(paired, plain_sets, chosen) if suite_side == "baseline" else Pairing(plain_sets, paired, chosen)


def _bench_kind(folders: list[Path]) -> str | None:
    """The bench kind of one bench of a suite run (or of each launch of a set of them), from the first of its
    folders that has a meta.json; None where none has (a bench that failed before writing one)."""
    for folder in folders:
        if (folder / store.META_FILE).exists():
            return store.kind_name(folder)
    return None


def load_run(path: Path, folders: list[Path] | None = None, *, allow_empty: bool = False) -> Run:
    """The rows and samples of a run or run set. allow_empty: a run without rows (one that failed or was killed
    before its first point) reads as no rows, so that the gate can list what it misses."""
    results, samples, kinds, sampled = [], [], {}, True
    for launch, run_dir in enumerate(folders or run_folders(path)):
        kind = kind_of(run_dir)
        kinds[kind.name] = kind
        if allow_empty and not (run_dir / store.RESULTS_FILE).exists():
            continue
        frame = store.read_results(run_dir, kind)
        if frame.empty and not allow_empty:
            raise CommbenchError(f"{run_dir} has no result rows (an empty or failed run); pass a run that "
                                 "measured something")
        results.append(frame.assign(**{LAUNCH_COLUMN: launch}))
        if store.imported_without_samples(run_dir):
            sampled = False
            continue
        samples.append(store.read_samples(run_dir, kind))
    if len(kinds) > 1:
        raise CommbenchError(f"{path} mixes {' and '.join(kinds)} runs; a run set holds one sweep run repeatedly")
    kind = kinds.popitem()[1]
    return Run(Path(path), kind, _concat(results, kind.result_columns), _concat(samples, kind.sample_columns),
               sampled)


LAUNCH_COLUMN = "_launch"
"""Which launch of a run set a result row comes from (its index; a leading _: no results column is named so)."""


def _concat(frames: list[pd.DataFrame], columns: Sequence[str]) -> pd.DataFrame:
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*columns, LAUNCH_COLUMN])


def status_folders(path: Path) -> list[Path]:
    """Every folder whose meta.json says how a run ended: each run of a set, and each bench of a suite run."""
    folders = []
    for run_dir in run_folders(path):
        folders.append(run_dir)
        folders += [bench_dir for bench_dir in (store.suite_bench_dirs(run_dir) or {}).values()
                    if (bench_dir / store.META_FILE).exists()]
    return folders


def not_complete(path: Path) -> list[tuple[Path, str]]:
    """(folder, why) for each run under path whose meta.json does not say complete."""
    found = []
    for folder in status_folders(path):
        meta = store.read_meta(folder)
        status = meta.get("status")
        if status != store.STATUS_COMPLETE:
            reason = f": {meta['reason']}" if meta.get("reason") else ""
            found.append((folder, f"status {status or 'not recorded'}{reason}"))
    return found


def check_baseline_complete(baseline_dir: Path) -> None:
    incomplete = not_complete(baseline_dir)
    if incomplete:
        folder, why = incomplete[0]
        raise CommbenchError(f"the baseline {folder} is not a complete run ({why}); a gate needs a complete "
                             "baseline: re-record it")


def sources(run: Run) -> str:
    """The tool(s) a run's rows come from (the source column; commbench for rows written before it)."""
    if "source" not in run.results.columns:
        return COMMBENCH_SOURCE
    return "+".join(sorted(set(run.results["source"].fillna(COMMBENCH_SOURCE).astype(str)))) or COMMBENCH_SOURCE


def _unknown_keys(path: Path) -> list[str]:
    from commbench.benches.collective import KIND

    found: set[str] = set()
    for folder in status_folders(path):
        if (folder / store.RESULTS_FILE).exists() and store.read_meta(folder).get("kind") == KIND.name:
            results = store.read_results(folder, KIND)
            found |= {column for column in ("dtype", "op") if not results.empty
                      and (results[column].astype(str) == UNKNOWN).all()}
    return sorted(found)


def cross_source_view(run: Run, other: Run) -> Run:
    """The rows of a run that meet another tool's: the builtin implementation (what nccl-tests and PARAM time: the
    library's own call), and where the run timed both ways, the other side's timing mode (imports are batch)."""
    frame = run.results
    if "impl" in frame.columns:
        frame = frame[frame["impl"].astype(str) == BUILTIN]
    if "timing" in frame.columns and frame["timing"].nunique() > 1:
        matching = frame[frame["timing"].isin(set(other.results.get("timing", pd.Series(dtype=str))))]
        frame = matching if not matching.empty else frame[frame["timing"] == frame["timing"].iloc[0]]
    return Run(run.path, run.kind, frame, run.samples, run.has_samples)


UNKNOWN = "unknown"
"""What an import writes where its tool logs no such key (NCCL Inspector logs neither dtype nor op)."""


def known_identity(identity: Sequence[str], base: Run, new: Run) -> tuple[str, ...]:
    """The cross-source identity without the keys one side does not know (all its rows `unknown`) where the other
    side measured a single value of them: the rows then join on the rest (a live job's log against a lab sweep of one
    dtype); where the other side has several, the key stays and nothing joins (the import's --dtype/--op say which)."""
    dropped = set()
    for column in ("dtype", "op"):
        for side, other in ((base, new), (new, base)):
            if column in identity and column in side.results.columns and not side.results.empty \
                    and (side.results[column].astype(str) == UNKNOWN).all() \
                    and other.results[column].astype(str).nunique() == 1:
                dropped.add(column)
    return tuple(column for column in identity if column not in dropped)


def source_notes(baseline_dir: Path, new_dir: Path) -> list[str]:
    """When a side holds another tool's rows (commbench import): that the two sides time differently, naming each
    tool's timing method, and that a side without samples is judged by the threshold alone."""
    sides = {"baseline": timing_methods(baseline_dir), "new": timing_methods(new_dir)}
    notes = []
    if set(sides["baseline"]) != set(sides["new"]):
        methods = "; ".join(f"{side} from {source}: {method}" for side, by_source in sides.items()
                            for source, methods in by_source.items() for method in sorted(methods))
        notes.append("the two sides come from different tools, which time differently, so a difference may be the "
                     "timing method as much as the system. Rows are joined on collective, size, dtype, op, placement "
                     f"and world size (commbench's builtin rows; the matching timing mode where both ran). {methods}")
    for side, path in (("baseline", baseline_dir), ("new", new_dir)):
        unknown = _unknown_keys(path)
        if unknown:
            notes.append(f"the {side} side's rows do not say their {' or '.join(unknown)} (its tool logs none): they "
                         "join the other side's rows where that side measured one value, else none; import with "
                         f"{' and '.join('--' + key for key in unknown)} to say which")
        if any(store.imported_without_samples(folder) for folder in status_folders(path)
               if (folder / store.RESULTS_FILE).exists()):
            notes.append(f"the {side} side was imported from a tool that records no per-iteration samples: its "
                         "verdicts rest on the threshold alone, without the significance test (p -)")
    return notes


def timing_methods(path: Path) -> dict[str, set[str]]:
    """{source: the timing methods its rows name} over every collective run under path."""
    found: dict[str, set[str]] = {}
    for folder in status_folders(path):
        if not (folder / store.RESULTS_FILE).exists() or not kind_of(folder).cross_source_identity:
            continue  # a kind whose rows only commbench measures has no other tool's timing to name
        frame = store.read_results(folder, kind_of(folder))
        for source, method in zip(frame["source"].fillna(COMMBENCH_SOURCE), frame["timing_method"].fillna("")):
            # one line per method, not per batch length ("batch: 4 back-to-back calls" and "... 7 ..." alike)
            method = re.sub(r"\d+(?= back-to-back)", "N", str(method))
            found.setdefault(str(source), set()).add(method or "not recorded")
    return found


def expected_note(new_dir: Path, entries: list[dict]) -> list[str]:
    """What the new side's busbw can be held against (commbench expect), unless --fail-below-expected already did."""
    from commbench.expect.rows import expected_lines

    if any(entry.get("metric") == "busbw of expected" for entry in entries):
        return []
    found: list[str] = []
    for folder in status_folders(new_dir):
        if (folder / store.RESULTS_FILE).exists():
            found += [line.removeprefix("# ") for line in expected_lines(store.read_results(folder, kind_of(folder)))]
    found = list(dict.fromkeys(found))
    return [f"the new side's {'; '.join(found)}; --fail-below-expected PCT gates on it"] if found else []
