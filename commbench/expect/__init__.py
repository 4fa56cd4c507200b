"""Expected bandwidth from a machine's own topology: facts (facts.py: read here by probe.py, or a preset, or a facts
file), the model (model.py), the presets and published figures (presets.py), and the table `commbench expect`
prints (table.py)."""

from __future__ import annotations

from pathlib import Path

from commbench.errors import CommbenchError
from commbench.expect.facts import MachineFacts, read_facts
from commbench.expect.presets import preset

HERE = "this machine"


def chosen_facts(machine: str | None, facts_file: Path | str | None, *, measure: bool = True) -> tuple[MachineFacts,
                                                                                                        str]:
    """The facts --machine or --facts name (never both), else this machine's; and where they came from."""
    if machine and facts_file:
        raise CommbenchError("--machine and --facts both name a machine; pass one")
    if machine:
        return preset(machine), f"preset {machine}"
    if facts_file:
        return read_facts(Path(facts_file)), f"facts file {facts_file}"
    from commbench.expect.probe import facts_here

    return facts_here(measure=measure), HERE
