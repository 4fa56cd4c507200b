"""The tasks of one srun step as the ranks of one job: `srun -n 8 commbench sweep …` without RANK.

Each task srun starts is one rank, in place: RANK, WORLD_SIZE and MASTER_ADDR/MASTER_PORT come from the step's Slurm
variables (SLURM_PROCID, SLURM_STEP_NUM_TASKS, the step's first node, SLURM_JOB_ID/SLURM_STEP_ID), so every task
joins one process group instead of each launching a private `torchrun --standalone` (which gave one run folder per
task, each a job of its own). The local rank stays SLURM_LOCALID (Machine reads it): LOCAL_RANK is left unset so the
rank is still known as an srun task and the step's GPU binding applies (gpu_mapping.launcher_of).

`derive` is a pure function of the environment; `adopt` applies it to this process's environment at the CLI's start,
before anything reads RANK (only rank 0 prints, makes the run folder, writes). Only a step of more than one task is
taken: a single task (`srun -n 1`, or the batch step of sbatch/salloc, which sets SLURM_NTASKS but no step
variables) keeps commbench launching torchrun itself.
"""

import os
import re
import subprocess
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass

from commbench import gpu_mapping

PORT_BASE, PORT_SPAN = 10000, 10000
"""MASTER_PORT is PORT_BASE + (job id × 16 + step id) mod PORT_SPAN: the same on every task of a step, different
for the steps of a job (up to 16) and for jobs sharing a first node, below Linux's ephemeral ports (32768+), and
apart from the rendezvous ports of `commbench slurm submit` (20000 + job id mod 20000)."""
STEPS_PER_JOB = 16


@dataclass(frozen=True, kw_only=True)
class SrunRanks:
    """This task's place in the step, as the job's ranks."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    master_node: str
    """The step's first node (where task 0 runs), by its Slurm name, which need not resolve (see node_address)."""
    master_port: int

    def environment(self, environ: Mapping[str, str], address_of: Callable[[str], str]) -> dict[str, str]:
        """The variables to add: RANK, WORLD_SIZE, and MASTER_ADDR/MASTER_PORT unless the user set them (theirs
        win, e.g. to pick a network). address_of(node name) gives the address the other nodes reach it by."""
        added = {"RANK": str(self.rank), "WORLD_SIZE": str(self.world_size)}
        if not environ.get("MASTER_ADDR"):
            added["MASTER_ADDR"] = address_of(self.master_node)
        if not environ.get("MASTER_PORT"):
            added["MASTER_PORT"] = str(self.master_port)
        return added


@dataclass(frozen=True)
class SrunRefusal:
    """A step whose tasks cannot each be a rank: said, exit 2, by whatever would launch ranks (resolve_target)."""

    message: str


def derive(environ: Mapping[str, str]) -> SrunRanks | SrunRefusal | None:
    """This task as a rank of its srun step; a refusal where one task per rank would leave GPUs idle; None where
    there is nothing to derive (not an srun task, a single task, or RANK/WORLD_SIZE set by the user or torchrun)."""
    if "RANK" in environ or "WORLD_SIZE" in environ:
        return None
    tasks, rank = _number(environ, "SLURM_STEP_NUM_TASKS"), _number(environ, "SLURM_PROCID")
    if tasks is None or rank is None or tasks < 2:
        return None
    first = first_node(environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_NODELIST") or "")
    if first is None:
        return None
    refusal = _not_one_per_gpu(environ, tasks)
    if refusal:
        return SrunRefusal(refusal)
    job, step = _number(environ, "SLURM_JOB_ID") or 0, _number(environ, "SLURM_STEP_ID") or 0
    return SrunRanks(rank=rank, world_size=tasks, local_rank=_number(environ, "SLURM_LOCALID") or 0,
                     local_world_size=gpu_mapping.slurm_tasks_on_node(environ), master_node=first,
                     master_port=PORT_BASE + (job * STEPS_PER_JOB + step) % PORT_SPAN)


def _not_one_per_gpu(environ: Mapping[str, str], tasks: int) -> str | None:
    """Why the step's tasks cannot be its ranks: on a node where the step holds GPUs, fewer tasks than GPUs, each
    seeing several (e.g. one task per node, meant to run torchrun) would use one GPU each and leave the rest idle.
    A task bound to one GPU (--gpus-per-task=1, --gpu-bind=single:1) is one task per GPU; a step without GPUs (CPU,
    gloo) is one task per rank; more tasks than GPUs is gpu_mapping's refusal, with NCCL only."""
    gpus = gpu_mapping.step_gpus_on_node(environ)  # the step's, also in a bound task that lists only its own
    here = gpu_mapping.slurm_tasks_on_node(environ)
    if not gpus or here is None or here >= gpus:
        return None
    visible = gpu_mapping.visible_device_ids(environ)
    if visible is not None and len(visible) <= 1:
        return None
    nodes = _number(environ, "SLURM_STEP_NUM_NODES") or 1
    return (f"srun started {tasks} task(s), {here} on this node where the step holds {gpus} GPU(s), and commbench "
            "runs one rank per srun task, so GPUs would sit idle; start one task per GPU (srun --ntasks-per-node="
            f"{gpus} --gpus-per-task=1 commbench …), or one task per node running torchrun (srun --ntasks-per-node=1 "
            f"torchrun --nnodes={nodes} --nproc-per-node={gpus} --rdzv-backend=c10d --rdzv-endpoint=FIRST_NODE:29500 "
            "-m commbench …), or use `commbench slurm submit`")


def _number(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


_RANGE = re.compile(r"\[([^\]]*)\]")


def first_node(hostlist: str) -> str | None:
    """The first name of a Slurm hostlist ("gpu[007-009,012],login1" → "gpu007"), as `scontrol show hostnames`
    lists it first: the first entry, each bracket replaced by the start of its first range (zero padding kept)."""
    depth, end = 0, len(hostlist)
    for position, char in enumerate(hostlist):  # the first comma outside brackets ends the first entry
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = position
            break
    entry = hostlist[:end].strip()
    if not entry or entry.count("[") != entry.count("]"):
        return None
    return _RANGE.sub(lambda match: match.group(1).split(",")[0].split("-")[0].strip(), entry) or None


def node_address(node: str) -> str:
    """The address Slurm reaches `node` by (its NodeAddr: node names need not resolve, and on a one-host test cluster
    they do not), or the name itself when scontrol cannot say."""
    try:
        shown = subprocess.run(["scontrol", "show", "node", node], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return node
    found = re.search(r"\bNodeAddr=(\S+)", shown.stdout) if shown.returncode == 0 else None
    return found.group(1) if found else node


def adopt(environ: MutableMapping[str, str] | None = None,
          address_of: Callable[[str], str] = node_address) -> SrunRanks | SrunRefusal | None:
    """Make this srun task a rank of its step by setting RANK, WORLD_SIZE and MASTER_ADDR/PORT in `environ` (this
    process's environment by default); a refusal is only returned: it is said where ranks would be launched, so that
    `srun -N2 commbench env` (one task per node, launching nothing) still runs."""
    environ = os.environ if environ is None else environ
    derived = derive(environ)
    if isinstance(derived, SrunRanks):
        environ.update(derived.environment(environ, address_of))
    return derived


def refusal(environ: Mapping[str, str]) -> str | None:
    """The refusal of derive() for this environment, None when there is none."""
    derived = derive(environ)
    return derived.message if isinstance(derived, SrunRefusal) else None
