"""What NVIDIA's example tuner plugin (nccl/plugins/tuner/example, plugin.c) can express, and how a winning
environment combination becomes one of its lines, or why it cannot.

The plugin reads `collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks` and, for a call that
matches a line, sets that algorithm/protocol's cost to 0 so NCCL picks it. It knows five collectives and parses any
other name as allreduce, an unknown algorithm as ring and an unknown protocol as simple (plugin.c's parseCollType,
parseAlgorithm, parseProtocol): a name it does not know would silently tune something else, so such winners get no
line."""

from collections.abc import Callable
from dataclasses import dataclass

from commbench.sweep.env_axes import NCCL_ALGO, NCCL_PROTO, parse_label

COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter",
               "broadcast": "broadcast", "reduce": "reduce"}
"""commbench's collective → the plugin's name (parseCollType)."""
ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
              "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain", "pat": "pat"}
"""NCCL_ALGO's value (case and underscores aside) → the plugin's name (parseAlgorithm)."""
PROTOCOLS = {"ll": "ll", "ll128": "ll128", "simple": "simple"}
"""NCCL_PROTO's value (case aside) → the plugin's name (parseProtocol)."""
RING_ONLY = ("broadcast", "reduce")
"""NCCL runs broadcast and reduce with the ring algorithm only."""
DEFAULT_PROTOCOL = "simple"
"""Written where the winning run left the protocol to NCCL: the plugin needs one, and every algorithm has Simple."""
_NOT_ONE = set(",;:^") | {" ", "\t"}
"""A list (ring,tree), an exclusion (^nvls) or a per-collective setting (allreduce:tree) names no single choice."""


@dataclass(frozen=True)
class Expressed:
    """A winning combination as a plugin line: its algorithm and protocol, or why there is none."""

    algorithm: str | None = None
    protocol: str | None = None
    why_no_line: str = ""
    notes: tuple[str, ...] = ()
    """What was written that the measurement did not name, and why."""

    @property
    def choice(self) -> tuple[str, str] | None:
        return (self.algorithm, self.protocol) if self.algorithm and self.protocol else None


def plugin_name(collective: str) -> str | None:
    return COLLECTIVES.get(collective)


def expressed(collective: str, env: str) -> Expressed:
    """How the plugin would force `env` (an env label) for `collective`, or why it cannot."""
    if collective not in COLLECTIVES:
        return Expressed(why_no_line=f"the example plugin tunes {', '.join(COLLECTIVES.values())} only, and would "
                                     f"read {collective} as allreduce")
    environment = parse_label(env)
    if not environment:
        return Expressed(why_no_line="NCCL's own choice (the default environment) is fastest: nothing to force")
    others = sorted(name for name in environment if name not in (NCCL_ALGO, NCCL_PROTO))
    if others:
        return Expressed(why_no_line=f"the winner also sets {', '.join(others)}, which the plugin cannot set: its "
                                     "line would run something other than what was measured")
    notes = []
    if NCCL_ALGO in environment:
        algorithm, why = _single(NCCL_ALGO, environment[NCCL_ALGO], ALGORITHMS, lambda value: value.replace("_", ""))
        if algorithm is None:
            return Expressed(why_no_line=why)
    elif collective in RING_ONLY:
        algorithm = "ring"
        notes.append(f"NCCL_ALGO was not an axis: ring is written, NCCL's only algorithm for {collective}")
    else:
        return Expressed(why_no_line=f"NCCL_ALGO was not set in the winning run (NCCL chose the algorithm) and "
                                     f"{collective} has several: the plugin needs one, so measure with --nccl-algo")
    if NCCL_PROTO in environment:
        protocol, why = _single(NCCL_PROTO, environment[NCCL_PROTO], PROTOCOLS, lambda value: value)
        if protocol is None:
            return Expressed(why_no_line=why)
    else:
        protocol = DEFAULT_PROTOCOL
        notes.append("NCCL_PROTO was not an axis (the measured run let NCCL choose the protocol per size): simple is "
                     "written, since the plugin needs one; sweep --nccl-proto too to choose it by measurement")
    return Expressed(algorithm, protocol, notes=tuple(notes))


def _single(name: str, value: str, known: dict[str, str], normal: Callable[[str], str]) -> tuple[str | None, str]:
    if _NOT_ONE & set(value):
        return None, f"{name}={value} allows several choices (a list or an exclusion), so it names no single one"
    found = known.get(normal(value.lower()))
    if found is None:
        return None, f"{name}={value} is not a value the plugin knows ({', '.join(sorted(set(known.values())))})"
    return found, ""
