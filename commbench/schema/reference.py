"""docs/columns.md, generated from the declarations so that it cannot drift from them:

    python3 -m commbench.schema.reference > docs/columns.md

tests/test_schema.py fails when the committed page differs from what this prints."""

import sys

from commbench.schema.column import Column
from commbench.schema.files import FILES, DeclaredFile

COMMAND = "python3 -m commbench.schema.reference > docs/columns.md"

_INTRO = f"""# Result columns

<!-- Generated from commbench/schema/ by `{COMMAND}`; edit the declarations, not this page. -->

Every file a run writes under `results/<run-id>/`, column by column, in file order: what each holds, in which unit,
as which type. An empty cell is "not measured" or "does not apply". Columns in **bold** are required: a results file
without them is refused as not commbench's; the others were added later, and an older file that lacks them reads them
as empty. Each column is declared once, in `commbench/schema/` (one module per bench kind, the shared ones in
`common.py`): this page is generated from those declarations by `{COMMAND}`.
"""


def _cell(column: Column, required: bool) -> str:
    name = f"**`{column.name}`**" if required else f"`{column.name}`"
    return f"| {name} | {column.unit or '-'} | {column.dtype} | {column.meaning} |"


def _file_section(file: DeclaredFile) -> list[str]:
    required = set(file.required)
    return [f"### {file.name}", "", "| column | unit | type | meaning |", "| --- | --- | --- | --- |",
            *(_cell(column, column in required) for column in file.columns), ""]


def reference() -> str:
    """The whole page, Markdown."""
    lines = [_INTRO]
    kinds: list[str] = []
    for file in FILES:
        if file.kinds not in kinds:
            kinds.append(file.kinds)
            lines += [f"## {file.kinds}", ""]
        lines += _file_section(file)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference())
