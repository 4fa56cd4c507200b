"""What one step of the GPU check (gpu_validation.py) is: the Context it runs in, the Step with its command, check,
world and expected times, the worlds it runs at, and the helpers its commands and checks share (commbench's command
line, the device options, a run's rows checked)."""

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from process_group import StepResult

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_FACTOR = 1.5
"""Each step's timeout is this multiple of its expected time, so a hung step costs at most half as much again."""


@dataclass
class Context:
    out: Path
    gpu: bool
    """False: the CPU stand-ins (gloo on CPU tensors, 2 ranks, smaller sizes)."""
    gpus: int = 1
    """N, the node's GPUs: the world of the steps that run on every GPU."""


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    """The property it must show, in words (the plan's line)."""
    command: Callable[[Context], list[str]]
    check: Callable[[Context, StepResult], str | None]
    """None when the property holds, else what is wrong (or it raises StepFailed saying so)."""
    world: Callable[[int], str]
    """Its ranks on a node of N GPUs, in words: "1", "8", "4 on 1 GPU", "-" where it starts none."""
    one_gpu_s: float | None
    """Expected seconds on a node of one GPU (H200-1's, docs/measurements.md "One GPU", where it ran there, else an
    estimate); None: the step does not run on one GPU."""
    several_gpus_s: float | None
    """Expected seconds on a node of 8 GPUs (an estimate); None: the step does not run on several GPUs."""
    instead: str = ""
    """Where it runs on one kind of node only: what proves its property on the other."""
    after: tuple[str, ...] = field(default=())
    """Steps whose output it reads."""

    def expected_s(self, gpus: int) -> float | None:
        return self.one_gpu_s if gpus == 1 else self.several_gpus_s

    def timeout_s(self, gpus: int) -> int:
        expected = self.expected_s(gpus)
        if expected is None:
            raise ValueError(f"{self.name} does not run on a node of {gpus} GPU(s)")
        return math.ceil(TIMEOUT_FACTOR * expected)


def no_ranks(gpus: int) -> str:
    return "-"


def one_rank(gpus: int) -> str:
    return "1"


def every_gpu(gpus: int) -> str:
    return str(gpus)


def on_the_one_gpu(ranks: int) -> Callable[[int], str]:
    return lambda gpus: f"{ranks} on 1 GPU"


def replay_world(gpus: int) -> str:
    return "2 on 1 GPU" if gpus == 1 else str(gpus)


def commbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "commbench", *args]


def on_device(ctx: Context, *, gloo_on_cuda: bool = False, nproc: int = 1) -> list[str]:
    """The placement options: NCCL (or gloo on CUDA tensors) on the GPU, else gloo on CPU with 2 ranks."""
    if not ctx.gpu:
        return ["--backend", "gloo", "--device", "cpu", "--nproc", "2"]
    return ["--backend", "gloo" if gloo_on_cuda else "nccl", "--device", "cuda", "--nproc", str(nproc)]


def run_dir(ctx: Context, run_id: str) -> Path:
    return ctx.out / run_id


def results_of(ctx: Context, run_id: str) -> pd.DataFrame:
    found = sorted(run_dir(ctx, run_id).rglob("results.csv"))
    if not found:
        raise FileNotFoundError(f"no results.csv under {run_dir(ctx, run_id)}")
    return pd.concat([pd.read_csv(path) for path in found], ignore_index=True)


class StepFailed(Exception):
    """What is wrong with a step's outcome (the table's detail)."""


def exit_0(process: StepResult) -> None:
    if process.returncode != 0:
        tail = (process.stderr or process.stdout or "").strip().splitlines()[-3:]
        raise StepFailed(f"exit {process.returncode}: {' | '.join(tail)}")


def checked_rows(ctx: Context, process: StepResult, run_id: str) -> pd.DataFrame:
    """The run's rows, after it exited 0, none of them with wrong results."""
    exit_0(process)
    rows = results_of(ctx, run_id)
    if rows.empty or ("n_wrong" in rows and (rows["n_wrong"] != 0).any()):
        raise StepFailed(f"{len(rows)} rows, n_wrong {rows['n_wrong'].tolist() if 'n_wrong' in rows else '-'}")
    return rows
