"""Which algorithms NCCL may pick for a run: its version and the row's environment (NCCL_ALGO, NCCL_NVLS_ENABLE)
narrow what the hardware offers. The expectation is then the best healthy figure among those (expect/model.py), as
NCCL's tuner picks the fastest algorithm it has at large messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

RING, TREE, NVLS, NVLS_TREE, P2P = "ring", "tree", "nvls", "nvls_tree", "p2p"
NVLS_SINCE = (2, 17)
"""NCCL 2.17 added NVLS (single-node NVLink SHARP all-reduce); NVLS-tree across nodes came with 2.18."""
NVLS_TREE_SINCE = (2, 18)
_NAMES = {"ring": RING, "tree": TREE, "nvls": NVLS, "nvlstree": NVLS_TREE, "collnetdirect": "collnet_direct",
          "collnetchain": "collnet_chain", "pat": "pat"}
"""NCCL_ALGO's names (src/enqueue.cc ncclAlgoStr, matched without case), as the model calls them."""
_FUNCTIONS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
              "broadcast": "broadcast", "reduce": "reduce"}


@dataclass(frozen=True)
class NcclContext:
    """What the NCCL of a run allows: its version (None: not known, taken as a current NCCL and said) and the
    variables of the row's environment that choose algorithms."""

    version: tuple[int, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def allowed(self, algorithm: str, collective: str) -> str | None:
        """None when NCCL may run `algorithm` for `collective`, else why not (said in the expectation's terms)."""
        if algorithm in (NVLS, NVLS_TREE):
            since = NVLS_SINCE if algorithm == NVLS else NVLS_TREE_SINCE
            if self.version is not None and tuple(self.version[:2]) < since:
                return f"NCCL {'.'.join(map(str, self.version))} predates {algorithm.upper()} " \
                       f"({'.'.join(map(str, since))})"
            if self.env.get("NCCL_NVLS_ENABLE", "").strip() == "0":
                return "NCCL_NVLS_ENABLE=0"
        chosen = algorithm_filter(self.env.get("NCCL_ALGO", ""), collective)
        if chosen is not None and algorithm != P2P and not chosen(algorithm):
            return f"NCCL_ALGO={self.env['NCCL_ALGO']}"
        return None

    def version_said(self) -> str:
        return ("NCCL " + ".".join(map(str, self.version))) if self.version else "NCCL version not known: a current " \
                                                                                  "NCCL assumed"


def algorithm_filter(text: str, collective: str) -> Callable[[str], bool] | None:
    """NCCL_ALGO as a predicate on algorithm names, None when it does not narrow this collective.

    NCCL's form (docs env.rst NCCL_ALGO, tuning.cc parseList): a comma list allows those algorithms, a leading "^"
    allows all but those; from 2.24 entries separated by ";" may name a function ("allreduce:tree,ring"), the first
    entry without a function applying to every function, and a later entry for a function replacing it."""
    chosen = None
    for index, entry in enumerate(part for part in text.split(";") if part.strip()):
        function, _, names = entry.partition(":") if ":" in entry else ("", "", entry)
        if function.strip() and _FUNCTIONS.get(function.strip().lower()) != collective:
            continue
        if index and not function.strip():
            continue  # NCCL refuses a later entry without a function; the first one stands
        chosen = names.strip()
    if not chosen:
        return None
    exclude = chosen.startswith("^")
    names_set = {_NAMES.get(name.strip().lower(), name.strip().lower()) for name in chosen.lstrip("^").split(",")
                 if name.strip()}
    return (lambda algorithm: algorithm not in names_set) if exclude else (lambda algorithm: algorithm in names_set)
