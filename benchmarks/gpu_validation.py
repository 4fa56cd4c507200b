"""Benchmark (not a test): the whole GPU check of a node in one script, at world 1 and at world N (the node's N GPUs),
sized for 9 minutes of device time on one GPU and 10 minutes on 8, the machine's start included.

Each step is a real `commbench` command (or benchmarks/gpu_probes.py, node_facts.py, vs_nccl_tests.py) run in a
process group of its own (benchmarks/process_group.py) with a timeout and a property its output must have: a step past
its timeout is stopped with every process it started (torchrun, each rank) and is a failed row of the table that
closes the run; the check goes on with the next step. Where a step runs on one GPU or on several, and at which world,
is in gpu_check_steps.py's STEPS; what one GPU can prove is in ../shared/notes/gpu-single-h200.md (NCCL at world 1,
where every collective is a device copy or nothing; gloo on CUDA tensors at several ranks, all_reduce and broadcast
only).

    python benchmarks/gpu_validation.py [--out DIR] [--only STEP,...] [--archive DIR]  # on a GPU node
    python benchmarks/gpu_validation.py --plan [--gpus N]                              # the plan and its estimate
    python benchmarks/gpu_validation.py --dry-run [--gpus N] [--out DIR]               # anywhere

The plan names every step with its world, expected time and timeout, the step-by-step estimate of device time with
the machine's start, the worst case (every step at its timeout), and whether nccl-tests' binaries are in
.vendor/nccl-tests-bin (built on a CPU machine by `vs_nccl_tests.py --build-only`, carried with the checkout): the
exact command to build them where they are missing.

It reruns in place: each run starts by removing what an earlier run of this script left in --out (the folder holds a
marker file it wrote). --archive DIR writes the node's archive into DIR/MACHINE-DATE-COMMIT/ (tests/data/gpu/ in the
repository): gpu_validation.json (every step's outcome, the estimate, the probes, the vs_nccl_tests pairs), README.md,
node_facts.py's nvidia-smi.txt, nvml.json and nccl-topo.xml, the nccl-tests and commbench texts, and each step's
output in steps/; and the same folder as one file, OUT/MACHINE-DATE-COMMIT.tar.gz, to attach to a report.

--dry-run prints the plan, then runs each step that can run without a GPU as its CPU stand-in: the same command on
gloo/CPU tensors with 2 ranks and smaller sizes, judged by the same property. It proves the script, the commands and
the checks; only a GPU proves the GPU paths. Exit code: 0 when every step that ran passed, 1 otherwise, 2 no GPU
without --dry-run or --plan.
"""

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the gpu_check_* modules beside it, also from tests
from gpu_check_archive import archive, commit_of
from gpu_check_context import Context
from gpu_check_plan import Estimate, not_planned, planned, print_plan
from gpu_check_run import fresh_out, print_table, run_all
from gpu_check_steps import STEPS
from process_group import run_step


def visible_gpus() -> tuple[int, str | None]:
    """The CUDA GPUs visible here and the first one's compute capability ("90"), in a process of its own: this one
    starts no CUDA context before its steps."""
    probe = run_step([sys.executable, "-c", "import torch; n = torch.cuda.device_count(); "
                      "print(n, ''.join(map(str, torch.cuda.get_device_capability(0))) if n else '')"], timeout_s=120)
    words = probe.stdout.split() if probe.ok else []
    return (int(words[0]), words[1] if len(words) > 1 else None) if words else (0, None)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("/tmp/commbench-gpu-validation"))
    parser.add_argument("--dry-run", action="store_true", help="the plan, then every step's CPU stand-in")
    parser.add_argument("--plan", action="store_true", help="the plan and its estimate of device time; run nothing")
    parser.add_argument("--gpus", type=int, help="N, the node's GPUs: the plan's world N [default: every visible GPU; "
                                                 "1 where none is]")
    parser.add_argument("--only", default="", help="comma-separated step names [default: all]")
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("--archive", type=Path, help="write the archive into ARCHIVE/MACHINE-DATE-COMMIT/")
    parser.add_argument("--commit", help="the commit to name in the archive [default: git's HEAD]")
    args = parser.parse_args(argv)
    args.names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(args.names) - {step.name for step in STEPS})
    if unknown:
        parser.error(f"unknown step(s) {unknown}; choose from {[step.name for step in STEPS]}")
    if args.gpus is not None and args.gpus < 1:
        parser.error(f"--gpus {args.gpus}: a node has 1 GPU or more")
    for name in ("out", "json", "archive"):  # the steps run from the repository's root: a relative path would move
        if getattr(args, name) is not None:
            setattr(args, name, getattr(args, name).absolute())
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    real_run = not (args.dry_run or args.plan)
    found, arch = visible_gpus() if real_run or args.gpus is None else (0, None)
    if real_run and not found:
        print("no CUDA GPU is visible: run with --dry-run for the plan and the CPU stand-ins", file=sys.stderr)
        return 2
    if real_run and (args.gpus or 0) > found:
        print(f"--gpus {args.gpus}, but {found} CUDA GPU(s) are visible here", file=sys.stderr)
        return 2
    # --plan shows the GPU node's commands (it runs none); --dry-run the stand-ins it runs
    ctx = Context(out=args.out, gpu=not args.dry_run, gpus=args.gpus or max(1, found))
    steps = planned(ctx.gpus, args.names)
    if not args.plan:
        fresh_out(args.out)
    print_plan(steps, not_planned(ctx.gpus, args.names), ctx, arch)
    if args.plan:
        return 0
    outcomes = run_all(steps, ctx)
    print_table(outcomes)
    if args.json:
        args.json.write_text(json.dumps([asdict(outcome) for outcome in outcomes], indent=2))
    if args.archive:
        target = archive(args.archive, ctx, outcomes, commit_of(args.commit), Estimate(ctx.gpus, tuple(steps)))
        print(f"archived in {target}; as one file: {ctx.out / target.name}.tar.gz")
    return 0 if all(outcome.verdict != "FAIL" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
