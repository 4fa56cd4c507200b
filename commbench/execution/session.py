"""Run resolved benches from start to verdict: prepare their run folders, run the ranks, record how each ended.

One path for a single bench and for a suite's benches: consecutive benches share one launch (one torchrun, one
process group) unless a bench wants a launch per point; inside torchrun or srun every bench runs in place, in the
job's one process group.
"""

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from commbench import runinfo, store
from commbench.bench_kind import Bench, Point
from commbench.errors import CommbenchError, RunOutputError
from commbench.execution import launch, stopping
from commbench.machine import Machine, TorchrunStarter
from commbench.names import BIND_CORES_ENV, CPU
from commbench.progress import RowCounter, SweepProgress
from commbench.runs import Outcome, read_outcome

RANK_MODULE = "commbench.rank"


def prepare_run_dir(bench: Bench, run_dir: Path, *, argv: list[str], suite_run: str | None = None,
                    extra_meta: Mapping[str, object] | None = None) -> Path:
    """Write what the ranks will run (spec.json) and what is known before they start (meta.json, with the kind and
    what the command adds, e.g. `commbench perf`'s nccl-tests settings)."""
    (run_dir / store.SPEC_FILE).write_text(bench.spec.to_json() + "\n", encoding="utf-8")
    # a suite's bench is named suite-run/bench in its rows, so rows of several runs stay apart when concatenated
    run_id = f"{suite_run}/{run_dir.name}" if suite_run else run_dir.name
    meta = {**runinfo.launch_meta(argv, run_id), "kind": bench.kind.name, **(extra_meta or {})}
    if suite_run:
        meta["suite_run"] = suite_run
    store.write_meta(run_dir, meta)
    return run_dir


def launch_groups(benches: list[Bench]) -> list[list[int]]:
    """Indexes of consecutive benches that can share one launch; a bench with a launch per point stands alone."""
    groups: list[list[int]] = []
    for index, bench in enumerate(benches):
        if _alone(bench) or not groups or _alone(benches[groups[-1][0]]):
            groups.append([index])
        else:
            groups[-1].append(index)
    return groups


def _alone(bench: Bench) -> bool:
    """A bench with launches of its own (one per point, or one per environment combination)."""
    return bench.process_per_point or bool(bench.environments)


@dataclass(frozen=True)
class Ran:
    """How running the benches ended: truthy when every one completed."""

    ok: bool
    problems: bool = False
    """In place: rank 0 found wrong results (or a hunt's suspects) in a completed bench. Every rank of the job then
    exits 1 alike: a torchrun agent whose rank failed alone leaves the other nodes' agents waiting out their exit
    barrier (300 s) before they end."""

    def __bool__(self) -> bool:
        return self.ok


def run_benches(benches: list[Bench], run_dirs: list[Path | None], machine: Machine, *, quiet: bool) -> Ran:
    """Run the benches into their prepared folders (None on ranks other than 0 in place); truthy when every one
    completed. A bench that fails stops the ones after it."""
    if machine.in_job:
        return _run_in_place(benches, run_dirs, machine, quiet=quiet)
    for group in launch_groups(benches):
        # forked ranks only where the parent saw no GPU: a process that queried CUDA must not be forked into ranks
        fork_ranks = machine.gpus == 0 and all(benches[i].spec.device == CPU for i in group)
        folders = cast(list[Path], [run_dirs[i] for i in group])  # the launcher prepared every one
        if benches[group[0]].environments:
            done = _launch_environments(benches[group[0]], folders[0], quiet=quiet, fork_ranks=fork_ranks,
                                        torch_host=machine.torch_host)
        else:
            done = _launch_group([benches[i] for i in group], folders, quiet=quiet, fork_ranks=fork_ranks,
                                 torch_host=machine.torch_host)
        if not done:
            return Ran(False)
    return Ran(True)


def _launch_group(benches: list[Bench], run_dirs: list[Path], *, quiet: bool, fork_ranks: bool,
                  torch_host: TorchrunStarter | None) -> bool:
    """One torchrun for the group (or, for a bench with a launch per point, one per point), watched for crashes
    and hangs; True when every bench of it completed."""
    program = launch.rank_program(RANK_MODULE, [arg for run_dir in run_dirs for arg in ("--run-dir", str(run_dir))],
                                  fork=fork_ranks)
    nproc = benches[0].spec.nproc
    counters = [RowCounter(run_dir / store.RESULTS_FILE) for run_dir in run_dirs]
    stored = None
    if benches[0].process_per_point:
        commands = [launch.torchrun_command(nproc=nproc, program=[*program, "--only", str(point.index)])
                    for point in benches[0].points]

        def stored(index: int) -> bool:  # the launch of point `index` wrote its row
            return RowCounter(run_dirs[0] / store.RESULTS_FILE)() > index
    else:
        commands = [launch.torchrun_command(nproc=nproc, program=program)]
    timeout_s = max(bench.spec.timeout_s for bench in benches)
    log_path = run_dirs[0] / store.LAUNCH_LOG
    env = launch_env(benches[0], fork_ranks=fork_ranks)
    preload = _rank_imports(benches, fork_ranks=fork_ranks)
    outcomes = _watch_launches(commands, points=[point for bench in benches for point in bench.points],
                               count_rows=lambda: sum(count() for count in counters), log_path=log_path,
                               timeout_s=timeout_s, quiet=quiet, stored=stored, env=env, torch_host=torch_host,
                               preload=preload)
    for run_dir in run_dirs:
        if store.read_meta(run_dir).get("status") != store.STATUS_COMPLETE:
            record_outcome(run_dir, outcomes, timeout_s, log_path=log_path)  # the bench that was running
            return False
    # every bench stored its rows and said complete: ranks failing on the way out only get noted, with the last
    record_outcome(run_dirs[-1], outcomes, timeout_s, log_path=log_path)
    return True


def _launch_environments(bench: Bench, run_dir: Path, *, quiet: bool, fork_ranks: bool,
                         torch_host: TorchrunStarter | None) -> bool:
    """One torchrun per environment combination (Bench.environments), each measuring its points (--only). A launch
    that fails before storing any of its rows, not hung and not stopped, with the backend's message for a setting it
    does not support (environments.REFUSAL_MESSAGES) is a refused combination: its points become rows noted
    "not available: <the message>", and the next combination runs. Any other failure is a crash and ends the run as
    a failed sweep naming the combination, keeping every row stored."""
    from commbench.execution import environments

    program = launch.rank_program(RANK_MODULE, ["--run-dir", str(run_dir)], fork=fork_ranks)
    count = RowCounter(run_dir / store.RESULTS_FILE)
    log_path, timeout_s = run_dir / store.LAUNCH_LOG, bench.spec.timeout_s
    base_env = launch_env(bench, fork_ranks=fork_ranks) or dict(os.environ)
    torn_down: list[launch.LaunchOutcome] = []
    refused: list[dict[str, object]] = []
    with SweepProgress(bench.points, enabled=not quiet) as bar:
        progress = _progress(bar, count, log_path)
        for variables, indexes in bench.environments:
            rows_before, log_start = count(), environments.log_size(log_path)
            command = launch.torchrun_command(nproc=bench.spec.nproc,
                                              program=[*program, "--only", ",".join(map(str, indexes))])
            outcome = launch.run_watched(command, log_path=log_path, timeout_s=timeout_s, progress=progress,
                                         env={**base_env, **variables}, torch_host=torch_host,
                                         preload=_rank_imports([bench], fork_ranks=fork_ranks))
            stored = count() - rows_before
            if outcome.ok or (stored >= len(indexes) and not outcome.stopped_by):
                torn_down += [] if outcome.ok else [outcome]  # every row stored: ranks broke on the way out
                continue
            refused_by = None if outcome.stalled_s is not None or outcome.stopped_by or stored else \
                environments.refusal(run_dir, log_path, log_start)
            if refused_by is None:
                _record_failed_combination(run_dir, variables, outcome, timeout_s, log_path)
                return False
            store.remove_stray_temporaries(run_dir)
            environments.write_unavailable(bench, run_dir, indexes, refused_by)
            refused.append({"env": variables, "reason": refused_by})
            store.update_meta(run_dir, status=store.STATUS_RUNNING, reason=None, unavailable=refused)
            progress()
    if store.read_meta(run_dir).get("status") != store.STATUS_COMPLETE:  # the last combination was refused
        store.update_meta(run_dir, status=store.STATUS_COMPLETE, end_time=runinfo.utc_now())
    record_outcome(run_dir, torn_down, timeout_s, log_path=log_path)
    return True


def _record_failed_combination(run_dir: Path, variables: dict[str, str], outcome: launch.LaunchOutcome,
                               timeout_s: float, log_path: Path) -> None:
    """The run fails as any sweep does when a combination's launch fails without the backend refusing its setting
    (a crash, a hang, a stop); its reason starts with the combination, which a plain sweep's failure has not."""
    from commbench.sweep.env_axes import label_of

    record_outcome(run_dir, [outcome], timeout_s, log_path=log_path)
    meta = store.read_meta(run_dir)
    if meta.get("status") == store.STATUS_FAILED:
        label = label_of(variables) or "the default environment"
        store.update_meta(run_dir, reason=f"combination {label} failed: {meta.get('reason')}")


def _rank_imports(benches: list[Bench], *, fork_ranks: bool) -> tuple[str, ...]:
    """What the torch host loads before it forks torchrun: the benches' rank imports where the ranks are forked from
    it; ranks that are fresh interpreters (on GPUs) import them themselves, so loading them there would only delay
    the launch."""
    return tuple(dict.fromkeys(module for bench in benches for module in bench.kind.rank_imports)) if fork_ranks else ()


def launch_env(bench: Bench, *, fork_ranks: bool) -> dict[str, str] | None:
    """The environment of the bench's launches: this process's, with --bind-cores' cores and the bench's own
    variables (a launch's benches share their target: a suite sets it once), and for forked ranks the store kept out
    of torchrun's agent (launch.forked_ranks_env); None when nothing is added."""
    added = dict(bench.launch_env)
    if bench.cores is not None:
        added[BIND_CORES_ENV] = ",".join(map(str, bench.cores))
    added.update(launch.forked_ranks_env(fork_ranks))
    return {**os.environ, **added} if added else None


def _watch_launches(commands: list[list[str]], *, points: Sequence[Point], count_rows: Callable[[], int],
                    log_path: Path, timeout_s: float, quiet: bool, stored: Callable[[int], bool] | None = None,
                    env: dict[str, str] | None = None, torch_host: TorchrunStarter | None = None,
                    preload: tuple[str, ...] = ()) -> list[launch.LaunchOutcome]:
    """Run the commands one after another until one fails; the progress bar follows the rows rank 0 appends, and a
    launch that adds no row for timeout_s is stopped. A launch that failed after its work was stored (stored(index):
    its row is on disk) does not stop the next: its ranks broke on the way out, after every check."""
    outcomes = []
    with SweepProgress(points, enabled=not quiet) as bar:
        progress = _progress(bar, count_rows, log_path)
        for index, command in enumerate(commands):
            outcome = launch.run_watched(command, log_path=log_path, timeout_s=timeout_s, progress=progress, env=env,
                                         torch_host=torch_host, preload=preload)
            outcomes.append(outcome)
            if not outcome.ok and (outcome.stopped_by or stored is None or not stored(index)):
                break
    return outcomes


def _progress(bar: SweepProgress, count_rows: Callable[[], int], log_path: Path) -> Callable[[], int]:
    """The watchdog's progress callback: the rows stored so far, shown on the bar; a run folder removed while the
    ranks run stops them (run_watched), since nothing more can be recorded."""
    def progress() -> int:
        if not log_path.parent.exists():
            raise _removed_while_running(log_path.parent)
        done = count_rows()
        bar.show(done)
        return done

    return progress


def record_outcome(run_dir: Path, outcomes: list[launch.LaunchOutcome], timeout_s: float,
                   log_path: Path | None = None) -> None:
    """Make meta.json tell the truth once the ranks are gone: complete only if rank 0 said so after storing every
    row (each checked on all ranks). A launch that failed after that (seen: a rank aborting in gloo's teardown,
    "terminate called without an active exception") is recorded as `teardown`, and the run stays complete."""
    store.remove_stray_temporaries(run_dir)  # the ranks are gone: a temporary left now is a killed rank's
    meta = store.read_meta(run_dir)
    log_path = log_path or run_dir / store.LAUNCH_LOG
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if meta.get("status") == store.STATUS_COMPLETE:
        if failed:
            causes = "; ".join(_failure_cause(outcome, timeout_s, log_path) for outcome in failed)
            store.update_meta(run_dir, teardown=f"{causes} after its rows were stored (see {log_path})")
        return
    cause = _failure_cause(failed[-1], timeout_s, log_path) if failed else \
        "the ranks exited without finishing the sweep"
    reasons = [cause, _output_trouble(run_dir), meta.get("reason"), f"see {log_path}"]
    store.update_meta(run_dir, status=store.STATUS_FAILED, reason="; ".join(r for r in reasons if r),
                      end_time=runinfo.utc_now())


def _output_trouble(run_dir: Path) -> str | None:
    """Why the ranks may have failed to write (their own messages may not have reached the full disk either)."""
    try:
        stats = os.statvfs(run_dir)
    except (OSError, AttributeError):  # AttributeError: no statvfs on Windows
        return None
    if stats.f_flag & os.ST_RDONLY:
        return f"the file system of {run_dir} is read-only"
    if stats.f_bavail == 0:
        return f"the file system of {run_dir} is full"
    return None


def _failure_cause(outcome: launch.LaunchOutcome, timeout_s: float, log_path: Path) -> str:
    if outcome.stalled_s is not None:
        return (f"no point finished for {outcome.stalled_s:.0f} s (--timeout {timeout_s:g}): a rank hung or is too "
                "slow; all ranks were stopped")
    if outcome.stopped_by:
        ranks = "all ranks were stopped" if outcome.returncode is not None else "no rank had started"
        return f"stopped by {stopping.describe(outcome.stopped_by)}; {ranks}"
    log_text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    return launch.failed_rank_summary(log_text) or f"torchrun exited with code {outcome.returncode}"


def _run_in_place(benches: list[Bench], run_dirs: list[Path | None], machine: Machine, *, quiet: bool) -> Ran:
    """As one rank of the job commbench was started in (torchrun or srun): every bench in the job's process group;
    rank 0 writes and shows progress."""
    from commbench.execution import driver
    rank = machine.rank
    timeout_s = max(bench.spec.timeout_s for bench in benches)
    completed = False
    try:
        with driver.joined(machine, [bench.spec for bench in benches], timeout_s=timeout_s) as (ctx, group):
            for bench, run_dir in zip(benches, run_dirs):
                with SweepProgress(bench.points, enabled=rank == 0 and not quiet) as bar:
                    done = 0

                    def on_point(point: Point) -> None:
                        nonlocal done
                        done += 1
                        bar.show(done)

                    try:
                        driver.run_bench(bench.kind, bench.spec, ctx, run_dir=run_dir, on_point=on_point)
                    except Exception:  # rank 0's meta.json says why; the other ranks only stop
                        group.clean = False
                        return Ran(False)
            completed = True
            problems = ctx.broadcast_object(_found_problems(benches, run_dirs) if rank == 0 else None)
    except Exception as error:  # joining or leaving the job's process group failed
        return Ran(_record_group_failure(run_dirs, error, after_every_bench=completed))
    return Ran(True, problems=bool(problems))


def _found_problems(benches: list[Bench], run_dirs: list[Path | None]) -> bool:
    return any(read_outcome(bench.kind, run_dir).n_wrong for bench, run_dir in zip(benches, run_dirs) if run_dir)


def _record_group_failure(run_dirs: list[Path | None], error: Exception, *, after_every_bench: bool) -> bool:
    """The process group failed around the benches (a rendezvous that never formed, a peer that broke the
    teardown): benches still `running` fail with the cause; when every bench had stored its rows and said complete,
    the failure is a teardown note and the run stays complete. True when the run stands complete."""
    lines = str(error).strip().splitlines()
    cause = f"{type(error).__name__}: {lines[0] if lines else ''}"
    written = [run_dir for run_dir in run_dirs if run_dir is not None]
    if after_every_bench and written and all(
            store.read_meta(run_dir).get("status") == store.STATUS_COMPLETE for run_dir in written):
        store.update_meta(written[-1], teardown=f"{cause} after its rows were stored")
        return True
    for run_dir in written:
        if store.read_meta(run_dir).get("status") == store.STATUS_RUNNING:
            store.update_meta(run_dir, status=store.STATUS_FAILED, reason=f"rank 0: {cause}",
                              end_time=runinfo.utc_now())
    return False


def run_bench(bench: Bench, machine: Machine, *, out: Path, run_id: str | None, argv: list[str],
              quiet: bool, extra_meta: Mapping[str, object] | None = None) -> tuple[Ran, Outcome | None]:
    """A bench into a new run folder, results/<run-id>/ (made by rank 0 in place); (completed, its outcome), the
    outcome None on ranks other than 0 in place."""
    writes = not machine.in_job or machine.rank == 0
    with stop_window(machine) as stop:
        run_dir: Path | None = None
        if writes:
            with created(store.create_run_dir(out, run_id)) as run_dir:
                prepare_run_dir(bench, run_dir, argv=argv, extra_meta=extra_meta)
            stop.where = stopped_note(run_dir)
        with output_kept(run_dir):
            ok = run_benches([bench], [run_dir], machine, quiet=quiet)
            return ok, read_outcome(bench.kind, run_dir) if run_dir else None


def stop_window(machine: Machine) -> contextlib.AbstractContextManager[stopping.StopNote]:
    """The launcher defers stop signals while it runs (stopping.py); a rank inside torchrun or srun leaves them to
    its launcher, which stops it."""
    return contextlib.nullcontext(stopping.StopNote()) if machine.in_job else stopping.deferred()


def stopped_note(run_dir: Path) -> str:
    return f"all ranks were stopped; {run_dir / store.META_FILE} says failed and the rows stored before are kept"


@contextlib.contextmanager
def created(run_dir: Path, *, remove: bool = True) -> Iterator[Path]:
    """Filling a run folder before any rank starts: a failure to write (disk full, read-only file system) is bad
    input (exit 2) and, with remove, takes the half-made folder away, so a refused run leaves nothing behind."""
    try:
        yield run_dir
    except OSError as error:
        if remove:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise CommbenchError(f"cannot write into {run_dir}: {error.strerror or error}; nothing ran"
                             f"{' and the folder was removed' if remove else ''}: free space or choose another "
                             "--out") from None


def _removed_while_running(run_dir: Path) -> RunOutputError:
    return RunOutputError(f"the run stopped: its folder {run_dir} was removed while it ran")


@contextlib.contextmanager
def output_kept(run_dir: Path | None) -> Iterator[None]:
    """After the ranks started, a run folder that can no longer be written or read (disk full, read-only,
    removed) fails the run (exit 3) in one line; the launch has ended and its ranks are gone by then."""
    try:
        yield
    except OSError as error:
        where = error.filename or run_dir
        raise RunOutputError(f"the run stopped: cannot write {where}: {error.strerror or error}; rows stored "
                             "before are kept") from None
    except RunOutputError:
        raise
    except CommbenchError as error:  # our own files, unreadable: removed or torn while the run went on
        if run_dir is not None and not run_dir.exists():
            raise _removed_while_running(run_dir) from None
        raise RunOutputError(f"the run stopped: its folder {run_dir} was changed under it ({error})") from None
