"""Which node a rank is on, and the job's layout of ranks on nodes.

A node is named by SLURMD_NODENAME (Slurm's own name for it, what `--exclude` takes), else COMMBENCH_NODE_NAME (so
that a test can run several "nodes" on one host), else the host name. Ranks are grouped by that name, not by
torchrun's LOCAL_RANK, which says nothing about which ranks share a machine across launches."""

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

NODE_NAME_ENV = "COMMBENCH_NODE_NAME"


def node_name(environ: Mapping[str, str] | None = None) -> str:
    names: Mapping[str, str] = os.environ if environ is None else environ
    for variable in ("SLURMD_NODENAME", NODE_NAME_ENV):
        if names.get(variable, "").strip():
            return names[variable].strip()
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class Layout:
    """The nodes of a job in order of their lowest rank, and the ranks on each, ascending."""

    nodes: tuple[str, ...]
    ranks: dict[str, tuple[int, ...]]

    @classmethod
    def from_names(cls, names_by_rank: list[str]) -> "Layout":
        ranks: dict[str, list[int]] = {}
        for rank, name in enumerate(names_by_rank):
            ranks.setdefault(name, []).append(rank)
        return cls(tuple(ranks), {name: tuple(members) for name, members in ranks.items()})

    def node_of(self, rank: int) -> str:
        return next(name for name, members in self.ranks.items() if rank in members)

    def lanes(self, a: str, b: str) -> list[tuple[int, int]]:
        """The rank pairs that carry a node pair's traffic at once: local rank j of a with local rank j of b (every
        GPU and its NIC at work, as in a real job), as many as the smaller node has."""
        return list(zip(self.ranks[a], self.ranks[b]))

    def ranks_text(self, node: str) -> str:
        members = self.ranks[node]
        if members == tuple(range(members[0], members[-1] + 1)) and len(members) > 1:
            return f"{members[0]}-{members[-1]}"
        return ",".join(map(str, members))
