"""What `commbench selftest` runs on this machine: the target, each step's `commbench` command (made from the bench
kinds' own options dataclasses and resolved here, so bad input is refused before anything launches), the sweep's
expected points, and the paths that do not apply here, with the reason."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from commbench.bench_kind import Bench
from commbench.benches import KINDS, kind_for_command
from commbench.benches.collective import DEFAULT_COLLECTIVES
from commbench.benches.options import options_of, parse_options
from commbench.errors import CommbenchError
from commbench.names import CUDA, IMPLEMENTATIONS, NCCL, PER_ITERATION, TIMINGS, BackendChoice, DeviceChoice

if TYPE_CHECKING:
    from commbench.machine import Machine, Target

KIND_STEPS = tuple(kind.command for kind in KINDS.values() if kind.selftest_values is not None)
"""A step per bench kind that gives selftest a small run of its own (BenchKind.selftest_values), named by its
command, in registry order: ddp, fsdp, zero."""
STEPS = ("sweep", "profile", *KIND_STEPS, "report", "compare")
"""The steps, in run order: `--only` chooses among them. profile is the profiled sweep and `trace analyze`."""
NEEDS = {"report": ("sweep",), "compare": ("sweep",)}
"""Steps that read another step's run; choosing them with --only runs that step too."""

SMALL_BYTES = 4 * 1024
LARGE_BYTES = {"cpu": 4 * 1024**2, CUDA: 256 * 1024**2}
"""The two message sizes of the sweep: latency-bound and bandwidth-bound (larger on GPUs, which move 4 MiB in µs)."""
WARMUP, ITERS = 1, 6
"""Iterations per point: 6 timed samples are the fewest a 95 % CI of the median needs."""
@dataclass(frozen=True)
class ProfilePoint:
    """The one point the profile step traces, and what its traces can show."""

    collective: str
    placement: str
    """in or out (--placement)."""
    no_communication: str | None = None
    """Why the traces can hold no communication (the verdict then does not ask for it); None: each must."""


def profile_point(world: int, backend: str, device: str) -> ProfilePoint:
    """What the profile step traces at this world size, backend and device.

    NCCL with one rank runs a collective without communicating (ncclLaunchOneRank): in place it does nothing at all,
    out of place it copies the input to the output on the stream (cudaMemcpyAsync). So at world 1 the step traces
    an out-of-place all_gather, whose copy is work on the device that the check verifies, and the verdict asks for
    a GPU trace per rank instead of communication. all_reduce has no out-of-place form in torch."""
    if world == 1 and backend == NCCL and device == CUDA:
        return ProfilePoint("all_gather", "out",
                            "NCCL runs a one-rank collective as a device copy, with no communication kernel")
    return ProfilePoint("all_reduce", "in")


@dataclass(frozen=True)
class Command:
    """One `commbench` sub-run: its bench (resolved, None for report/compare/trace) and its arguments."""

    args: tuple[str, ...]
    bench: Bench | None = None


@dataclass(frozen=True, kw_only=True)
class Plan:
    backend: str
    device: str
    nproc: int
    gpus: int
    """CUDA GPUs visible here."""
    large_bytes: int
    selected: tuple[str, ...]
    """The steps that run (--only and what they need), in run order."""
    only: tuple[str, ...]
    """--only as given (empty: every step)."""
    timeout_s: float
    """Each step's wall-clock limit."""
    commands: dict[str, Command] = field(default_factory=dict)
    """The bench steps that apply here and were selected: sweep, profile, ddp, fsdp, zero."""
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Steps (and `collective NAME IMPL` paths) that cannot run on this target, with the reason."""
    collective_paths: tuple[tuple[str, str], ...] = ()
    """(collective, impl) of every implementation commbench has, in table order."""
    profile: ProfilePoint = ProfilePoint("all_reduce", "in")
    """What the profile step traces (`profile_point`)."""

    @property
    def sweep(self) -> Bench | None:
        command = self.commands.get("sweep")
        return command.bench if command else None


def plan_selftest(machine: Machine, *, backend: BackendChoice, device: DeviceChoice, nproc: int | None,
                  only: tuple[str, ...],
                  timeout_s: float, oversubscribe: bool = False) -> Plan:
    """Resolve the target as every command does and build each step's command; CommbenchError on bad input."""
    from commbench.machine import resolve_target

    if machine.in_job:
        raise CommbenchError("commbench selftest launches its own ranks; run it outside torchrun/srun "
                             "(RANK and WORLD_SIZE are set here)")
    if not (math.isfinite(timeout_s) and timeout_s > 0):  # a NaN limit never fires: the step could hang forever
        raise CommbenchError(f"--step-timeout {timeout_s:g} must be above 0 seconds (a finite number)")
    selected = _selected_steps(only)
    target = resolve_target(machine, backend=backend, device=device, nproc=nproc, oversubscribe=oversubscribe)
    paths, not_applicable = _collective_paths(target)
    runnable = [(name, impl) for name, impl in paths if f"{name} {impl}" not in not_applicable]
    large_bytes = LARGE_BYTES[target.device]
    common: dict[str, object] = {"backend": target.backend, "device": target.device, "nproc": target.nproc,
                                 "timeout": max(timeout_s / 2, 1.0)}  # the sub-run's own watchdog acts first
    if oversubscribe:  # a switch without a --no- form: passed on only when set
        common["oversubscribe"] = True
    profiled = profile_point(target.nproc, target.backend, target.device)
    commands = {step: _command("sweep", values, machine)
                for step, values in _sweep_values(common, runnable, large_bytes, profiled).items() if step in selected}
    for step in KIND_STEPS:
        try:  # the kind refuses what this target cannot run (gloo on CUDA tensors cannot shard), with its reason
            resolved = _command(step, {**common, **_selftest_values(step)}, machine)
        except CommbenchError as refused:
            not_applicable[step] = str(refused)
            continue
        if step in selected:
            commands[step] = resolved
    return Plan(backend=target.backend, device=target.device, nproc=target.nproc, gpus=machine.gpus,
                large_bytes=large_bytes, selected=selected, only=tuple(only), timeout_s=timeout_s,
                commands=commands, not_applicable=not_applicable, collective_paths=paths, profile=profiled)


def _selected_steps(only: tuple[str, ...]) -> tuple[str, ...]:
    """The steps that run, in run order: --only's (every step without it) and the steps they need."""
    for step in only:
        if step not in STEPS:
            raise CommbenchError(f"unknown --only step {step!r}; choose from {', '.join(STEPS)}")
    chosen = set(only or STEPS)
    chosen |= {need for step in chosen for need in NEEDS.get(step, ())}
    return tuple(step for step in STEPS if step in chosen)


def _collective_paths(target: Target) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """(collective, impl) of every implementation commbench has, in table order; those this target cannot run,
    `collective NAME IMPL` → the reason."""
    from commbench.backends import unsupported_reason
    from commbench.collectives import COLLECTIVES

    ordered = [*DEFAULT_COLLECTIVES, *sorted(set(COLLECTIVES) - set(DEFAULT_COLLECTIVES))]
    paths = tuple((name, impl) for name in ordered for impl in IMPLEMENTATIONS
                  if impl in COLLECTIVES[name].implementations)
    not_applicable: dict[str, str] = {}
    for name, impl in paths:
        reason = unsupported_reason(backend=target.backend, device=target.device, collective=name, impl=impl,
                                    dtype="float32", op="sum")
        if reason:
            not_applicable[f"{name} {impl}"] = reason
    return paths, not_applicable


def _sweep_values(common: dict[str, object], runnable: list[tuple[str, str]], large_bytes: int,
                  profiled: ProfilePoint) -> dict[str, dict[str, object]]:
    """The sweep step's and the profile step's options: both `commbench sweep`."""
    sweep = {**common, "collectives": tuple(dict.fromkeys(name for name, _ in runnable)),
             "impls": tuple(dict.fromkeys(impl for _, impl in runnable)),
             "sizes": f"{SMALL_BYTES},{large_bytes}", "placement": "both", "timings": TIMINGS,
             "warmup": WARMUP, "iters": ITERS}
    profile = {**common, "collectives": (profiled.collective,), "impls": ("builtin",), "sizes": str(SMALL_BYTES),
               "placement": profiled.placement, "timings": (PER_ITERATION,), "warmup": WARMUP, "iters": ITERS,
               "profile": True, "profile_iters": 2}
    return {"sweep": sweep, "profile": profile}


def _selftest_values(command: str) -> Mapping[str, object]:
    values = kind_for_command(command).selftest_values
    assert values is not None  # KIND_STEPS holds the kinds that give them
    return values


def _command(command: str, values: Mapping[str, object], machine: Machine) -> Command:
    """The sub-run's arguments, made from the same values its bench kind resolves here (so they cannot disagree)."""
    kind = kind_for_command(command)
    bench = kind.resolve(parse_options(kind.options, values), machine)
    args = [command]
    for f, described in options_of(kind.options):
        if f.name not in values:
            continue
        value = values[f.name]
        if described.switch:
            args.append(described.flag if value else f"--no-{described.key}")
        else:
            text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            args += [described.flag, text]
    return Command(tuple(args), bench)
