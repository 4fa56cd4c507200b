"""The expected busbw beside every stored busbw: per collective of a run, the figure (expected_busbw_gbps) and one
line on what it rests on or why there is none (expected_basis), both written into each row; and the whole
expectation (facts, origin, terms) for meta.json."""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.expect.facts import MachineFacts
from commbench.expect.model import expect

COLUMNS = ("expected_busbw_gbps", "expected_basis")


@dataclass(frozen=True)
class RunExpectation:
    by_collective: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    """collective → (expected busbw in GB/s or None, what it rests on or why there is none)."""
    document: dict = field(default_factory=dict)
    """For meta.json: origin, facts, scope and each collective's expectation with its terms."""

    def columns(self, collective: str) -> dict:
        busbw, basis = self.by_collective.get(collective, (None, "no expectation for this collective"))
        return {"expected_busbw_gbps": busbw, "expected_basis": basis}


def none_because(why: str, collectives) -> RunExpectation:
    by_collective: dict[str, tuple[float | None, str]] = {name: (None, f"none: {why}") for name in collectives}
    return RunExpectation(by_collective, {"why_none": why})


def for_run(facts: MachineFacts, origin: str, collectives, *, nodes: int, ranks_per_node: int,
            device: str) -> RunExpectation:
    found = {collective: expect(facts, collective, nodes=nodes, ranks_per_node=ranks_per_node, device=device)
             for collective in collectives}
    by_collective: dict[str, tuple[float | None, str]] = {}
    for collective, item in found.items():
        if item.busbw_gbps is None:
            by_collective[collective] = (None, f"none: {item.why_none}")
        else:
            by_collective[collective] = (round(item.busbw_gbps, 3), f"{item.algorithm}, bound by {item.bound}; "
                                         f"{facts.name} ({origin}), {nodes} node(s) × {ranks_per_node}")
    document = {"origin": origin, "facts": facts.to_json(), "nodes": nodes, "ranks_per_node": ranks_per_node,
                "device": device, "collectives": {name: item.to_json() for name, item in found.items()}}
    return RunExpectation(by_collective, document)


def for_sweep(machine, *, device: str, collectives, nproc: int) -> RunExpectation:
    """The expectation of a sweep on this machine (its own facts; the host's rates from the cache on CPU). It never
    stops a sweep: facts that cannot be read leave every row without a figure, saying why."""
    from commbench.expect import HERE
    from commbench.expect.probe import facts_here
    from commbench.names import CPU

    per_node = machine.local_world_size or nproc
    nodes = max(1, (machine.world_size or nproc) // per_node)
    try:  # ranks resolving in place (inside a job) read kept rates only: they never measure beside each other
        facts = facts_here(measure=device == CPU, kept_only=machine.in_job)
    except Exception as error:  # a sandbox without /sys, a loopback that cannot connect: no figure, and why
        return none_because(f"this machine's facts could not be read ({type(error).__name__}: {error})",
                            collectives)
    return for_run(facts, HERE, collectives, nodes=nodes, ranks_per_node=per_node, device=device)


NO_FACTS = "no facts of the machine that wrote the file: pass --machine PRESET or --facts FILE (commbench expect)"


def for_import(facts_and_origin, collectives, *, world: int | None, hosts: int, device: str) -> RunExpectation:
    """An import's expectation: the facts --machine or --facts named, at the file's scope (its hosts as nodes, the
    ranks spread evenly over them; one node where the file names no hosts)."""
    if facts_and_origin is None:
        return none_because(NO_FACTS, collectives)
    if not world:
        return none_because("the file does not say its world size: pass --world-size", collectives)
    facts, origin = facts_and_origin
    nodes = max(1, hosts)
    if world % nodes:
        return none_because(f"{world} ranks do not spread evenly over {nodes} hosts", collectives)
    return for_run(facts, origin, collectives, nodes=nodes, ranks_per_node=world // nodes, device=device)
