"""The GPU check's plan (gpu_validation.py --plan, and the head of every run): the steps a node of N GPUs runs, their
estimate of device time with the machine's start against the budget, and whether nccl-tests' binaries are prebuilt."""

from dataclasses import dataclass
from pathlib import Path

from gpu_check_context import ROOT, TIMEOUT_FACTOR, Context, Step
from gpu_check_steps import STEPS, compared_collectives, nccl_tests
from process_group import TERM_GRACE_S

MACHINE_START_S = 150
"""The device machine's start, counted in the check's device time. None has been measured (docs/measurements.md and
tests/data/gpu hold no start time; the device tool says 'a few minutes'): 150 s until one is."""
ONE_GPU_BUDGET_S = 9 * 60
"""The whole check on one GPU, with the machine's start: the lent machine gives 15 minutes of device time per session,
which the worst case (every step at its timeout) fits too."""
SEVERAL_GPUS_BUDGET_S = 10 * 60
"""The whole check on a node of up to 8 GPUs (world 1 and world N), with the machine's start."""
ESTIMATED_FOR_GPUS = 8
"""The several-GPU times are estimates for 8 GPUs (nothing has run on several GPUs yet); more GPUs take longer."""
DEFAULT_ARCH = "90"
"""The compute capability the printed build command names where no GPU is visible (H100, H200)."""


def planned(gpus: int, names: list[str]) -> list[Step]:
    """The steps that run on a node of `gpus` GPUs (of `names`, where given), in run order."""
    return [step for step in STEPS if step.expected_s(gpus) is not None and (not names or step.name in names)]


def not_planned(gpus: int, names: list[str]) -> list[Step]:
    return [step for step in STEPS if step.expected_s(gpus) is None and (not names or step.name in names)]


@dataclass(frozen=True)
class Estimate:
    """The device time of the planned steps on a node of `gpus` GPUs, with the machine's start."""

    gpus: int
    steps: tuple[Step, ...]

    @property
    def budget_s(self) -> int:
        return ONE_GPU_BUDGET_S if self.gpus == 1 else SEVERAL_GPUS_BUDGET_S

    @property
    def expected_s(self) -> float:
        return MACHINE_START_S + sum(step.expected_s(self.gpus) or 0 for step in self.steps)

    @property
    def timeouts_s(self) -> float:
        """Every step at its timeout."""
        return MACHINE_START_S + sum(step.timeout_s(self.gpus) for step in self.steps)

    @property
    def worst_s(self) -> float:
        """Every step at its timeout, each process group stopped within TERM_GRACE_S more."""
        return self.timeouts_s + TERM_GRACE_S * len(self.steps)


def estimate_lines(estimate: Estimate) -> list[str]:
    """The step-by-step table of device time and its totals."""
    gpus = estimate.gpus
    source = "H200-1's times where measured" if gpus == 1 else \
        f"estimates for {ESTIMATED_FOR_GPUS} GPUs (nothing has run on several GPUs yet)"
    lines = [f"# device time on a node of {gpus} GPU(s): {source}", "",
             "| step | world | expected (s) | timeout (s) |", "| --- | --- | ---: | ---: |",
             f"| machine start | - | {MACHINE_START_S} | {MACHINE_START_S} |"]
    lines += [f"| {step.name} | {step.world(gpus)} | {step.expected_s(gpus):g} | {step.timeout_s(gpus)} |"
              for step in estimate.steps]
    lines += [f"| total | | {estimate.expected_s:g} | {estimate.timeouts_s:g} |", "",
              f"# expected {estimate.expected_s:g} s ({estimate.expected_s / 60:.1f} min) of the {estimate.budget_s} s "
              f"budget, the machine's start included; worst case {estimate.worst_s:g} s ({estimate.worst_s / 60:.1f} "
              f"min): every step at its timeout ({TIMEOUT_FACTOR:g} x its expected time), stopped within "
              f"{TERM_GRACE_S:g} s"]
    if gpus > ESTIMATED_FOR_GPUS:
        lines.append(f"# more than {ESTIMATED_FOR_GPUS} GPUs: the world-N steps take longer than estimated here")
    return lines


def shown(path: Path) -> str:
    """A path as the user types it from the repository's root."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def binaries_lines(binaries: Path, collectives, arch: str | None) -> list[str]:
    """Whether the vs-nccl-tests step finds its nccl-tests programs prebuilt (for this GPU's architecture; None: any,
    where no GPU is visible), else the CPU-side command that builds them (every collective's, for either node) and
    how they travel."""
    missing = nccl_tests().missing_programs(binaries, collectives, arch)
    if not missing:
        return [f"# nccl-tests: {', '.join(nccl_tests().BINARIES[name] for name in collectives)} prebuilt in "
                f"{shown(binaries)}"]
    return [f"# nccl-tests: MISSING from {shown(binaries)}: {', '.join(missing)}. vs-nccl-tests would build them on "
            "the GPU machine first, past its timeout. Build them on a CPU machine (nvcc, torch's NCCL wheel, no GPU):",
            f"    python benchmarks/vs_nccl_tests.py --build-only --arch {arch or DEFAULT_ARCH} --binaries "
            f"{shown(binaries)}",
            f"  and carry {shown(binaries)} with the checkout (git-ignored: the device tool's carry, or rsync/scp to "
            "the node)"]


def plan_line(step: Step, gpus: int) -> str:
    return f"- {step.name} [world {step.world(gpus)}, expected {step.expected_s(gpus):g} s, timeout " \
           f"{step.timeout_s(gpus)} s]: {step.what}"


def print_plan(steps: list[Step], skipped: list[Step], ctx: Context, arch: str | None) -> None:
    print(f"# plan ({'GPU' if ctx.gpu else 'CPU stand-ins'}) for a node of {ctx.gpus} GPU(s): world 1 and world N = "
          f"{ctx.gpus}")
    for step in steps:
        print(f"{plan_line(step, ctx.gpus)}\n    {command_text(step, ctx)}")
    for step in skipped:
        print(f"- {step.name}: not on a node of {ctx.gpus} GPU(s): {step.instead}")
    print("\n".join(["", *estimate_lines(Estimate(ctx.gpus, tuple(steps)))]))
    if any(step.name == "vs-nccl-tests" for step in steps):
        print("\n".join(binaries_lines(nccl_tests().DEFAULT_BINARIES, compared_collectives(ctx.gpus), arch)))
    print(flush=True)


def command_text(step: Step, ctx: Context) -> str:
    """The step's command as the plan shows it: cut where it reads another step's output (not there yet)."""
    try:
        command = step.command(ctx)
    except Exception as error:  # the step fails alone when it runs (run_one); the plan says why now
        return f"(no command: {type(error).__name__}: {error})"
    return " ".join(command) if not step.after else f"(after {', '.join(step.after)}) {' '.join(command[:5])} ..."
