"""The bench-kind registry: every kind commbench can run, found by name (meta.json's "kind", the rows' `bench`) or
by command (`commbench sweep`, a suite's `kind = "sweep"`). Adding a kind: one module in this package that defines
KIND (commbench/bench_kind.py: BenchKind and its Spec), and its line below."""

from commbench.bench_kind import BenchKind
from commbench.benches import collective, ddp, fsdp, hunt, p2p, replay, strategy
from commbench.errors import CommbenchError

KINDS: dict[str, BenchKind] = {kind.name: kind for kind in (
    collective.KIND,
    ddp.KIND,
    fsdp.KIND,
    strategy.KIND,
    hunt.KIND,
    p2p.KIND,
    replay.KIND,
)}
COMMANDS: dict[str, BenchKind] = {kind.command: kind for kind in KINDS.values()}


def get_kind(name: str) -> BenchKind:
    """The kind a run folder's meta.json names."""
    try:
        return KINDS[name]
    except KeyError:
        raise CommbenchError(f"bench kind {name!r} is not known to this commbench (it knows "
                             f"{', '.join(KINDS)}); upgrade commbench to read this run") from None


def kind_for_command(command: str) -> BenchKind:
    """The kind a command (or a suite's `kind = ...`) runs."""
    return COMMANDS[command]
