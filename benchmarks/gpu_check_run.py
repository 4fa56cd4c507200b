"""Running the GPU check's steps (gpu_validation.py): each in its own process group with its timeout, its output kept
and judged by its check, the table of outcomes, and the --out folder each run starts from empty."""

import shutil
from dataclasses import dataclass
from pathlib import Path

from gpu_check_context import ROOT, Context, Step, StepFailed
from process_group import StepResult, run_step

CPU_TIMEOUT_FACTOR = 5
"""A CPU stand-in's timeout is this multiple of its step's: 2 gloo ranks on a small VM run slower than one GPU (the
stand-in of selftest took 103 s on a 2-core VM)."""


@dataclass
class Outcome:
    step: str
    world: str
    mode: str
    seconds: float | None
    verdict: str
    detail: str


def run_one(step: Step, ctx: Context) -> Outcome:
    """The step in its own process group, its output kept in OUT/steps/, judged by its check; past its timeout the
    group is stopped and the step fails, with no check run on what it left."""
    mode, world = ("GPU" if ctx.gpu else "CPU stand-in"), step.world(ctx.gpus)
    timeout = step.timeout_s(ctx.gpus) * (1 if ctx.gpu else CPU_TIMEOUT_FACTOR)
    try:
        command = step.command(ctx)
    except Exception as error:  # a step whose command cannot be made fails alone: the check goes on
        return Outcome(step.name, world, mode, None, "FAIL", f"no command: {type(error).__name__}: {error}")
    result = run_step(command, timeout_s=timeout, cwd=ROOT)
    keep_output(ctx.out / "steps", step.name, result)
    if result.timed_out:
        return Outcome(step.name, world, mode, result.seconds, "FAIL", result.why(timeout))
    try:
        problem = step.check(ctx, result)
    except StepFailed as failure:
        problem = str(failure)
    except (OSError, ValueError, KeyError) as error:  # a missing or unreadable output is the step's failure
        problem = f"{type(error).__name__}: {error}"
    return Outcome(step.name, world, mode, result.seconds, "FAIL" if problem else "PASS", problem or "")


def keep_output(folder: Path, name: str, result: StepResult) -> None:
    """A step's stdout and stderr as NAME.out and NAME.err: the archive carries them, the table only a failure's
    last lines."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.out").write_text(result.stdout)
    (folder / f"{name}.err").write_text(result.stderr)


def run_all(steps: list[Step], ctx: Context) -> list[Outcome]:
    """Every step in order, whatever the earlier ones did: a failed or stopped step is one row of the table."""
    outcomes = []
    for step in steps:
        outcome = run_one(step, ctx)
        outcomes.append(outcome)
        print(f"{outcome.step}: {outcome.verdict} ({outcome.mode}, world {outcome.world}) {outcome.detail}",
              flush=True)
    return outcomes


def print_table(outcomes: list[Outcome]) -> None:
    print("\n| step | world | mode | seconds | result | detail |\n| --- | --- | --- | --- | --- | --- |")
    for outcome in outcomes:
        seconds = "-" if outcome.seconds is None else f"{outcome.seconds:.1f}"
        print(f"| {outcome.step} | {outcome.world} | {outcome.mode} | {seconds} | {outcome.verdict} | "
              f"{outcome.detail} |")


MARKER = ".gpu_validation"
"""Written into --out by a run: a later run removes such a folder's contents before it starts, and nothing else."""


def fresh_out(out: Path) -> None:
    """An empty --out for this run: an earlier run's folders (their run ids) would refuse every step."""
    if out.exists() and (out / MARKER).exists():
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out} holds files this script did not write; pass an empty or new --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by benchmarks/gpu_validation.py; removed by its next run\n")
