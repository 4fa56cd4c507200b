"""Start-up: `commbench --help`, `--version`, Tab and the analytic `model` commands import no torch, scipy, pandas,
numpy or matplotlib, so they answer at once (importing those takes seconds; see benchmarks/startup.py); listing the
commands (`commbench --help`, Tab) imports none of them, and reads, for each, a stand-in whose summary reads as its own.

Each command runs in a fresh interpreter, because this test process has long imported them all. An import hook there
records, for each heavy module, the chain of commbench modules (and functions) on the stack when it was first asked
for, so a failure names the import to make lazy.
"""

import json
import subprocess
import sys

import click
import pytest

import commbench
from commbench.benches import KINDS
from commbench.cli import _COMMANDS, main
from tests.conftest import commbench_env

HEAVY = ("torch", "scipy", "pandas", "numpy", "matplotlib")

# Runs in the child: record who imports a heavy module, run the CLI in process as conftest's commbench_cli does,
# then print one JSON line after everything the command printed.
CHILD = r"""
import json, sys, types

HEAVY = {heavy!r}
importers = {{}}


class RecordImporter:
    # Asked first for every module not yet imported; answers None, so the real finders import it as usual.
    def find_spec(self, fullname, path=None, target=None):
        if fullname in HEAVY and fullname not in importers:
            frame, chain = sys._getframe(1), []
            while frame is not None:
                name, code = frame.f_globals.get("__name__", ""), frame.f_code.co_name
                if name.startswith("commbench"):  # a module body being imported, or a function that imports
                    label = name if code == "<module>" else f"{{name}}.{{code}}()"
                    if label not in chain:
                        chain.append(label)
                frame = frame.f_back
            importers[fullname] = " -> ".join(reversed(chain)) or "(not from a commbench module)"
        return None


sys.meta_path.insert(0, RecordImporter())
import commbench.cli

cli = commbench.cli.main
group = cli.main if isinstance(cli, types.ModuleType) else cli  # commbench.cli.main, a module or the group itself
try:
    returned = group.main(args={args!r}, standalone_mode=False)
    code = returned if isinstance(returned, int) else 0
except SystemExit as exit_:
    code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
sys.stdout.flush()
heavy = [name for name in HEAVY if name in sys.modules]
modules = sorted(name for name in sys.modules if name.startswith("commbench"))
print("\n@@startup@@" + json.dumps({{"code": code, "heavy": heavy, "importers": importers, "modules": modules}}))
"""

# Tab after `commbench `: zsh's completion, which lists every command with its summary
TAB = {"_COMMBENCH_COMPLETE": "zsh_complete", "COMP_WORDS": "commbench ", "COMP_CWORD": "1"}
COMMANDS = {
    "help": (["--help"], ["Usage:", "commbench", "Measure collectives at each message size"]),
    "tab": ([], ["sweep", "Measure collectives at each message size"]),
    "version": (["--version"], [commbench.__version__]),
    "model-memory": (["model", "memory", "--params", "7B", "--ranks", "8"], ["DDP", "ZeRO-3", "112.0"]),
    "model-comm": (["model", "comm", "--params", "7B", "--ranks", "8"], ["DDP", "ZeRO-3", "24.5"]),
}


def _run(name: str, tmp_path) -> tuple[str, dict]:
    """commbench with COMMANDS[name]'s arguments in a fresh interpreter, checked to succeed and print what it should:
    its output, and the child's report (heavy modules imported and by whom, every commbench module imported)."""
    args, expected = COMMANDS[name]
    completed = subprocess.run([sys.executable, "-c", CHILD.format(heavy=HEAVY, args=args)], cwd=tmp_path,
                               env=commbench_env(**(TAB if name == "tab" else {})), capture_output=True, text=True,
                               timeout=120)
    output, marker, report = completed.stdout.rpartition("\n@@startup@@")
    assert completed.returncode == 0 and marker, f"commbench {' '.join(args)} crashed:\n{completed.stderr[-3000:]}"
    result = json.loads(report)
    assert result["code"] == 0, f"commbench {' '.join(args)} exited {result['code']}:\n{completed.stderr[-3000:]}"
    for fragment in expected:
        assert fragment in output, f"{fragment!r} not in the output of commbench {' '.join(args)}:\n{output}"
    return output, result


@pytest.mark.parametrize("name", COMMANDS)
def test_light_commands_import_no_heavy_module(name, tmp_path):
    _, result = _run(name, tmp_path)
    heavy = result["heavy"]
    assert not heavy, (f"commbench {' '.join(COMMANDS[name][0])} imported {', '.join(heavy)}; first asked for by:\n" +
                       "\n".join(f"  {module}: {result['importers'].get(module, '?')}" for module in heavy))


@pytest.mark.parametrize("name", ["help", "tab"])
def test_listing_the_commands_imports_none_of_them(name, tmp_path):
    _, result = _run(name, tmp_path)
    command_modules = {"commbench.benches", "commbench.cli.bench"} | {
        f"commbench.cli.{where.partition(':')[0]}" for where, _ in _COMMANDS.values() if where != "bench"}
    imported = sorted(command_modules & set(result["modules"]))
    assert not imported, f"listing the commands ({name}) imported {', '.join(imported)}"


@pytest.mark.no_process
def test_the_listed_summaries_read_as_the_commands_own():
    """The stand-in that `commbench --help` and Tab list for a command not imported yet shows its summary as the
    command itself would, at every width Click lists them (its terminal's, up to Click's 80 columns); every command,
    each bench kind's included, has one."""
    assert {kind.command for kind in KINDS.values()} <= set(_COMMANDS)
    widest = 80 - 2 - 6 - max(map(len, _COMMANDS))  # HelpFormatter's width, less format_commands' spacing and names
    for name, (_, summary) in _COMMANDS.items():
        command, stand_in = main.commands[name], click.Command(name, help=summary)
        assert command.name == name and command.get_short_help_str(10**6).startswith(summary), name
        for limit in range(4, widest + 1):
            assert stand_in.get_short_help_str(limit) == command.get_short_help_str(limit), (name, limit)
