"""Which nodes test against which, round by round: every node in at most one pair per round, so that the pairs of a
round can run at once, each in its own process group, without sharing a node's links.

`circle_rounds` is the round-robin (circle) method that Microsoft SuperBench's pair-wise pattern uses: fix one node,
rotate the others; n − 1 rounds of n/2 disjoint pairs cover every pair exactly once (n odd: a bye each round, n
rounds). `random_rounds` draws K rounds of disjoint random pairs for allocations too large for all pairs."""

import random
from typing import TypeVar

_Node = TypeVar("_Node", str, int)
"""A node's name, or a rank (commbench p2p pairs ranks)."""


def circle_rounds(nodes: list[_Node]) -> list[list[tuple[_Node, _Node]]]:
    """Every unordered pair of `nodes` exactly once, in rounds of disjoint pairs (a node without a partner in a
    round, the bye, sits it out)."""
    _check_distinct(nodes)
    ring: list[_Node | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    count = len(ring)
    rounds: list[list[tuple[_Node, _Node]]] = []
    for _ in range(count - 1):
        pairs = [(ring[i], ring[count - 1 - i]) for i in range(count // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1]] + ring[1:-1]  # the first stays, the rest turn one place
    return [round_ for round_ in rounds if round_]


def random_rounds(nodes: list[str], rounds: int, *, seed: int) -> list[list[tuple[str, str]]]:
    """`rounds` rounds of disjoint pairs drawn at random (seeded, so every rank draws the same); with an odd count one
    node sits out each round, a different one as far as the draw allows."""
    _check_distinct(nodes)
    if rounds < 1:
        raise ValueError(f"{rounds} rounds: ask for at least one")
    draw = random.Random(seed)
    result = []
    for _ in range(rounds):
        order = list(nodes)
        draw.shuffle(order)
        result.append([(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)])
    return result


def _check_distinct(nodes: list[_Node]) -> None:
    if len(set(nodes)) != len(nodes):
        raise ValueError(f"node names repeat: {sorted(name for name in set(nodes) if nodes.count(name) > 1)}")


def disjoint_rounds(pairs: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The given pairs in as few rounds as a first fit finds, no node twice in a round (a second pass's re-pairs:
    a known-good node may be asked to partner several suspects, one round each)."""
    rounds: list[list[tuple[str, str]]] = []
    for pair in pairs:
        for round_ in rounds:
            if not {node for placed in round_ for node in placed} & set(pair):
                round_.append(pair)
                break
        else:
            rounds.append([pair])
    return rounds
