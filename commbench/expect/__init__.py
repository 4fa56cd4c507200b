"""Expected bandwidth from a machine's own topology: facts (facts.py: read here by probe.py, or a preset, or a facts
file), the model (model.py), the presets and published figures (presets.py), and the table `commbench expect`
prints (table.py)."""

from __future__ import annotations

import json
from pathlib import Path

from commbench.errors import CommbenchError
from commbench.expect.facts import MachineFacts
from commbench.expect.nccl_topology import facts_from_topology
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


def read_facts(path: Path) -> MachineFacts:
    """The facts in a file: a facts document, `commbench env --json`'s report (which holds one under "facts"), or
    NCCL's topology dump (NCCL_TOPO_DUMP_FILE)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("<"):
            return facts_from_topology(text, name=path.stem, source=str(path))
        document = json.loads(text)
    except FileNotFoundError:
        raise CommbenchError(f"{path} does not exist; write it with `commbench env --json > {path.name}`") from None
    except IsADirectoryError:
        raise CommbenchError(f"{path} is a folder; pass a facts file (`commbench env --json`) or NCCL's topology "
                             "dump") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommbenchError(f"{path} is not JSON ({type(error).__name__}); write it with `commbench env --json`") \
            from None
    if isinstance(document, dict) and isinstance(document.get("facts"), dict):
        document = document["facts"]
    return MachineFacts.from_json(document, where=str(path))
