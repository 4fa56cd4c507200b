"""Per-size verdicts → the plugin's lines: contiguous, non-overlapping byte ranges per collective and topology.

The plugin matches a call by collective, nBytes, nNodes and nRanks only: it cannot tell a dtype, an op, a placement
or a timing mode apart. So every group of one collective and topology votes on each measured size, and a size gets a
line only when all the groups that measured it chose the same algorithm and protocol; where one ties or they
disagree, the size gets none (NCCL decides). nBytes is what nccl-tests prints as the size and commbench stores as
size_bytes: the element size times the larger of the send and receive counts.

Adjacent measured sizes with the same choice merge into one line. Between two measured sizes the boundary is their
geometric midpoint: sizes are swept on a geometric grid and a collective's time is close to linear in log(size)
across a grid step, so the midpoint on the log scale is the unbiased guess for where the measured choice stops
holding (the fitted crossovers, shown beside the table, say where the lines cross when the fits are good). The
first range starts at 0 bytes and the last ends at 2^64 − 1 (the plugin reads sizes with strtoull); a size without
a line leaves its whole range to NCCL, so no two lines overlap."""

import math
from dataclasses import dataclass, field

from commbench.tune.decisions import Group, SizeDecision
from commbench.tune.plugin import plugin_name
from commbench.tune.verdicts import Verdict

MAX_BYTES = 2**64 - 1
CHANNELS = -1
"""-1: the line sets no channel count (but see docs/tune.md: the example plugin's own default)."""
ANY = -1
"""nNodes / nRanks of a line that matches every topology (--any-topology)."""


@dataclass(frozen=True)
class Topology:
    collective: str
    """commbench's name."""
    n_nodes: int
    n_ranks: int


@dataclass(frozen=True)
class ConfigLine:
    topology: Topology
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    sizes: tuple[int, ...]
    """The measured sizes the line covers."""
    notes: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        top = self.topology
        return (f"{plugin_name(top.collective)},{self.min_bytes},{self.max_bytes},{self.algorithm},{self.protocol},"
                f"{CHANNELS},{top.n_nodes},{top.n_ranks}")


@dataclass(frozen=True)
class NoLine:
    """A measured size left to NCCL, and why."""

    topology: Topology
    size_bytes: int
    why: str


@dataclass
class Plan:
    lines: list[ConfigLine] = field(default_factory=list)
    no_lines: list[NoLine] = field(default_factory=list)
    sizes: dict[Topology, list[int]] = field(default_factory=dict)
    """Every measured size of each topology, ascending: what tells adjacent sizes from distant ones."""


def topology_of(group: Group, any_topology: bool) -> Topology:
    if any_topology:
        return Topology(group.key["collective"], ANY, ANY)
    return Topology(group.key["collective"], int(group.key["nodes"]), int(group.key["world_size"]))


def plan(judged: list[tuple[Group, SizeDecision, Verdict]], *, any_topology: bool) -> Plan:
    """The lines and the sizes without one, per topology in the order first seen, sizes ascending."""
    votes: dict[Topology, dict[int, list[tuple[Group, Verdict]]]] = {}
    for group, decision, verdict in judged:
        votes.setdefault(topology_of(group, any_topology), {}).setdefault(decision.size_bytes, []).append(
            (group, verdict))
    result = Plan()
    for topology, by_size in votes.items():
        sizes = result.sizes[topology] = sorted(by_size)
        agreed = [_agreed(by_size[size]) for size in sizes]
        start = 0
        while start < len(sizes):
            choice, why, notes = agreed[start]
            end = start
            while choice is not None and end + 1 < len(sizes) and agreed[end + 1][0] == choice:
                end += 1
            if choice is None:
                result.no_lines.append(NoLine(topology, sizes[start], why))
            else:
                low = 0 if start == 0 else _cut(sizes[start - 1], sizes[start])
                high = MAX_BYTES if end == len(sizes) - 1 else _cut(sizes[end], sizes[end + 1]) - 1
                merged = tuple(dict.fromkeys(note for _, _, notes_ in agreed[start:end + 1] for note in notes_))
                result.lines.append(ConfigLine(topology, low, high, choice[0], choice[1],
                                               tuple(sizes[start:end + 1]), merged))
            start = end + 1
    return result


def _agreed(votes: list[tuple[Group, Verdict]]) -> tuple[tuple[str, str] | None, str, tuple[str, ...]]:
    """The choice every group voted for at one size, or None and why not."""
    choices = {verdict.choice for _, verdict in votes}
    if len(choices) == 1 and None not in choices:
        notes = tuple(dict.fromkeys(note for _, verdict in votes for note in verdict.notes))
        return choices.pop(), "", notes
    if choices == {None}:
        return None, "; ".join(dict.fromkeys(verdict.why_no_line for _, verdict in votes)), ()
    said = "; ".join(f"{variant}: {'/'.join(verdict.choice) if verdict.choice else verdict.short.lstrip('- ')}"
                     for variant, (_, verdict) in zip(_variants([group for group, _ in votes]), votes))
    return None, f"the variants disagree ({said}) and the plugin cannot tell them apart", ()


def _variants(groups: list[Group]) -> list[str]:
    """Each group named by what differs between them (e.g. out-of-place / in-place), its whole variant if nothing
    of it does."""
    names = [group.variant().split() for group in groups]
    differing = [index for index in range(len(names[0])) if len({name[index] for name in names}) > 1]
    return [" ".join(name[index] for index in differing) or " ".join(name) for name in names]


def _cut(low: int, high: int) -> int:
    """The first byte count past the geometric midpoint of two measured sizes, low < high: the smallest n with
    n ≥ √(low·high), in integers (no float rounding at 2^60)."""
    product = low * high
    root = math.isqrt(product)
    return root if root * root == product else root + 1
