"""The expected busbw beside every stored busbw: per collective of a run, the figure (expected_busbw_gbps) and one
line on what it rests on or why there is none (expected_basis), both written into each row; and the whole
expectation (facts, origin, terms) for meta.json."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from commbench.expect.facts import MachineFacts
from commbench.expect.model import expect
from commbench.expect.nccl_choice import NcclContext
from commbench.schema.common import EXPECTED_BASIS, EXPECTED_BUSBW_GBPS, EXPECTED_COLUMNS

if TYPE_CHECKING:
    import pandas as pd
    from _typeshed import DataclassInstance

    from commbench.machine import Machine

SpecT = TypeVar("SpecT", bound="DataclassInstance")
FactsAndOrigin = tuple[MachineFacts, str]
"""The facts --machine or --facts named, and where they come from."""

COLUMNS = EXPECTED_COLUMNS
"""The columns every kind that stores busbw adds to its rows (commbench/schema/common.py)."""
SAME_NODE, ACROSS_NODES = "same_node", "across_nodes"
"""p2p's and hunt's keys: a transfer between two ranks of one node (over the GPU's link), or of two nodes (one GPU's
NIC)."""
INTRA_ALL_REDUCE = "intra_all_reduce"


@dataclass(frozen=True)
class RunExpectation:
    by_collective: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    """collective (or a kind's own key) → (expected busbw in GB/s or None, what it rests on or why there is
    none)."""
    document: dict[str, object] = field(default_factory=dict)
    """For meta.json: origin, facts, scope and each key's expectation with its terms."""

    def onto(self, spec: SpecT) -> SpecT:
        """The spec with this expectation: its rows carry the figures, meta.json the document."""
        from dataclasses import replace

        return replace(spec, expectation=self.by_collective, expectation_document=self.document)

    def columns(self, collective: str, env: str = "") -> dict[str, object]:
        """The figure of a collective under the row's environment label (env_axes.label_of; "" the default)."""
        found = self.by_collective.get(env_key(collective, env)) if env else None
        busbw, basis = found or self.by_collective.get(collective, (None, "no expectation for this collective"))
        return {EXPECTED_BUSBW_GBPS: busbw, EXPECTED_BASIS: basis}


def env_key(key: str, env: str) -> str:
    """The key of a figure under an environment combination other than the run's own."""
    return f"{key} [{env}]" if env else key


def none_because(why: str, collectives: Iterable[str]) -> RunExpectation:
    by_collective: dict[str, tuple[float | None, str]] = {name: (None, f"none: {why}") for name in collectives}
    return RunExpectation(by_collective, {"why_none": why})


def for_run(facts: MachineFacts, origin: str, collectives: Iterable[str], *, nodes: int, ranks_per_node: int,
            device: str, nccl: NcclContext | None = None) -> RunExpectation:
    """Each collective at the run's scope."""
    return for_keys(facts, origin, {collective: (collective, nodes) for collective in collectives},
                    ranks_per_node=ranks_per_node, device=device, nccl=nccl)


def for_keys(facts: MachineFacts, origin: str, wanted: dict[str, tuple[str, int]], *, ranks_per_node: int,
             device: str, nccl: NcclContext | None = None,
             environments: dict[str, dict[str, str]] | None = None) -> RunExpectation:
    """key → (collective, nodes): one expectation per key (a hunt's lane is a sendrecv across 2 nodes, its node
    test an all_reduce on 1), and per environment combination of --env-axis beside the run's own (NCCL_ALGO and
    NCCL_NVLS_ENABLE change the algorithm NCCL picks): environments maps each combination's label (env_axes.label_of)
    to its variables, "" the run's own."""
    nccl = nccl or NcclContext()
    found = {}
    for label, environment in (environments or {"": {}}).items():
        context = NcclContext(nccl.version, {**nccl.env, **environment})
        for key, (collective, nodes) in wanted.items():
            found[env_key(key, label)] = expect(facts, collective, nodes=nodes,
                                                                ranks_per_node=ranks_per_node, device=device,
                                                                nccl=context)
    by_key: dict[str, tuple[float | None, str]] = {}
    for key, item in found.items():
        if item.busbw_gbps is None:
            by_key[key] = (None, f"none: {item.why_none}")
        else:
            by_key[key] = (round(item.busbw_gbps, 3), f"{item.algorithm}, bound by {item.bound}" +
                           (f", ceiling {item.ceiling_gbps:.4g} GB/s" if item.ceiling_gbps != item.busbw_gbps else "")
                           + f"; {facts.name} ({origin}), {item.nodes} node(s) × {ranks_per_node}")
    document = {"origin": origin, "facts": facts.to_json(), "ranks_per_node": ranks_per_node, "device": device,
                "nccl": nccl.version_said(), "expectations": {key: item.to_json() for key, item in found.items()}}
    return RunExpectation(by_key, document)


def for_sweep(machine: Machine, *, device: str, collectives: Iterable[str], nproc: int,
              environments: dict[str, dict[str, str]] | None = None) -> RunExpectation:
    """The expectation of a sweep on this machine: each collective at the job's scope, under each environment
    combination of the sweep."""
    per_node, nodes = _scope(machine, nproc)
    return for_machine(machine, device=device, nproc=nproc, environments=environments,
                       wanted={collective: (collective, nodes) for collective in collectives})


def for_machine(machine: Machine, *, device: str, nproc: int, wanted: dict[str, tuple[str, int]],
                environments: dict[str, dict[str, str]] | None = None) -> RunExpectation:
    """key → (collective, nodes) on this machine (its own facts; the host's rates from the cache on CPU). It never
    stops a run: facts that cannot be read leave every row without a figure, saying why."""
    from commbench.expect import HERE
    from commbench.expect.probe import facts_here
    from commbench.names import CPU

    per_node, _ = _scope(machine, nproc)
    try:  # ranks resolving in place (inside a job) read kept rates only: they never measure beside each other
        facts = facts_here(measure=device == CPU, kept_only=machine.in_job)
    except Exception as error:  # a sandbox without /sys, a loopback that cannot connect: no figure, and why
        return none_because(f"this machine's facts could not be read ({type(error).__name__}: {error})", wanted)
    import os

    nccl = NcclContext(machine.nccl_version, {name: value for name, value in os.environ.items()
                                              if name.startswith("NCCL_")})
    return for_keys(facts, HERE, wanted, ranks_per_node=per_node, device=device, nccl=nccl,
                    environments=environments)


def _scope(machine: Machine, nproc: int) -> tuple[int, int]:
    """(ranks per node, nodes) of the run: the job's, or nproc ranks on this one node."""
    per_node = machine.local_world_size or nproc
    return per_node, max(1, (machine.world_size or nproc) // per_node)


NO_FACTS = "no facts of the machine that wrote the file: pass --machine PRESET or --facts FILE (commbench expect)"


def for_import(facts_and_origin: FactsAndOrigin | None, collectives: Iterable[str], *, world: int | None, hosts: int,
               device: str, env: dict[str, str] | None = None) -> RunExpectation:
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
    return for_run(facts, origin, collectives, nodes=nodes, ranks_per_node=world // nodes, device=device,
                   nccl=NcclContext(None, env or {}))


def expected_lines(results: pd.DataFrame, *, what: str = "busbw") -> list[str]:
    """One line per distinct expectation a kind's rows carry (each figure with what it rests on, or why there is
    none), for its terminal table; none for rows written before the columns."""
    if EXPECTED_BASIS not in results.columns:
        return []
    seen = results[list(EXPECTED_COLUMNS)].dropna(subset=[EXPECTED_BASIS]).drop_duplicates()
    lines = []
    for figure, basis in seen.itertuples(index=False):
        if isinstance(basis, str) and basis.startswith("none: "):
            lines.append(f"# expected {what}: none ({basis.removeprefix('none: ')})")
        elif figure == figure:  # not NaN
            lines.append(f"# expected {what}: {float(figure):.4g} GB/s ({basis}; commbench expect)")
    return lines


NO_TRACE_FACTS = ("a trace does not hold its machine's topology: pass --machine PRESET or --facts FILE "
                  "(commbench expect)")


def for_trace_calls(facts_and_origin: FactsAndOrigin | None, groups: Iterable[tuple[str, int]]
                    ) -> list[dict[str, object]]:
    """The expected busbw of each (collective, group size) of a trace's calls, on the machine --machine or --facts
    names: a group wider than the machine's GPUs spans nodes of that many GPUs each."""
    found = []
    for collective, group in sorted(set(groups)):
        if facts_and_origin is None:
            found.append({"collective": collective, "group_size": group, "expected_busbw_gbps": None,
                          "expected_basis": f"none: {NO_TRACE_FACTS}"})
            continue
        facts, origin = facts_and_origin
        per_node = min(group, facts.gpus_per_node) if facts.gpus_per_node else group
        nodes = -(-group // per_node)
        figure, basis = for_keys(facts, origin, {collective: (collective, nodes)}, ranks_per_node=per_node,
                                 device="cuda" if facts.gpus_per_node else "cpu").by_collective[collective]
        found.append({"collective": collective, "group_size": group, "expected_busbw_gbps": figure,
                      "expected_basis": basis})
    return found
