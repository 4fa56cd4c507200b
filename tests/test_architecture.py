"""The structure the code promises: no import cycles (function-level and type-only imports included) and no loop
between folders, at most 20 top-level modules, a command line that parses and prints (no execution layer, no store
internals), every bench kind declared completely in the registry, and the command line and suites made from the same
options dataclasses."""

import ast
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from commbench.bench_kind import Bench, BenchKind
from commbench.benches import COMMANDS, KINDS
from commbench.benches.options import TARGET_KEYS, TargetOptions, option, options_of, parse_options
from commbench.cli import main
from commbench.cli.bench import bench_command
from commbench.errors import CommbenchError
from commbench.machine import Machine, resolve_target
from commbench.report.drawings import DRAW

pytestmark = pytest.mark.no_process

PACKAGE = Path(__file__).parent.parent / "commbench"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """commbench module → the commbench modules it imports anywhere in its file (top level or inside functions)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from package import submodule` imports the submodule; other names come from the module itself
                targets = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                           for alias in node.names]
            else:
                continue
            for target in targets:
                graph[name] |= {module for module in (target, *_outside_parents(target, name)) if module in modules
                                and module != name}
    return graph


def _outside_parents(target: str, importer: str) -> list[str]:
    """Importing a.b.c runs a/__init__ and a/b/__init__ first; a module inside a package imports it only after that
    package's __init__ has started, so only the packages that do not contain the importer count."""
    parts = target.split(".")
    parents = [".".join(parts[:end]) for end in range(1, len(parts))]
    return [parent for parent in parents if not importer.startswith(parent + ".")]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_not_even_through_function_level_imports():
    graph = _import_graph()
    assert len(graph) > 50 and graph["commbench.cli"]  # the walk found the package and its imports
    assert _cycles(graph) == []


def _package_of(module: str) -> str:
    """A module's room: its folder under commbench/ (commbench.sweep.spec -> commbench.sweep), or a top-level module
    itself."""
    return ".".join(module.split(".")[:2])


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder (or top-level module) -> those it imports, leaving out commbench/__init__ (it imports nothing)."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "commbench":
            continue
        source = _package_of(module)
        packages.setdefault(source, set()).update(_package_of(t) for t in targets if t != "commbench")
    return {source: targets - {source} for source, targets in packages.items()}


def test_no_loop_between_packages():
    """Folders import each other one way only: the architecture reads top-down from the folder names."""
    packages = _package_graph(_import_graph())
    assert {"commbench.sweep", "commbench.training", "commbench.cli"} <= set(packages)
    assert _cycles(packages) == []


def _imports_of(source: str) -> list[tuple[str, str | None]]:
    """(module, name) of every import in source, top level or inside functions: (module, None) for `import module`,
    (module, name) for `from module import name`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.extend((node.module, alias.name) for alias in node.names)
    return found


def _reaches_in(module: str, name: str | None, forbidden: str) -> bool:
    """Whether importing name from module (or module itself) imports forbidden or a module inside it."""
    full = module if name is None else f"{module}.{name}"
    return any(target == forbidden or target.startswith(forbidden + ".") for target in (module, full))


def _cli_breaches(sources: dict[str, str]) -> list[str]:
    """What the cli modules (module name -> source) import that a command that parses and prints must not: the
    execution layer (any of its modules), or a store internal (a name starting with _ from commbench.store, or
    store._name read off the module)."""
    breaches = []
    for module, source in sorted(sources.items()):
        for target, name in _imports_of(source):
            if _reaches_in(target, name, "commbench.execution"):
                breaches.append(f"{module} imports {target if name is None else f'{target}.{name}'}")
            elif target == "commbench.store" and name is not None and name.startswith("_"):
                breaches.append(f"{module} imports commbench.store.{name}")
        breaches += [f"{module} reads store.{node.attr}" for node in ast.walk(ast.parse(source))
                     if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                     and node.value.id == "store" and node.attr.startswith("_")]
    return breaches


def test_the_cli_parses_and_prints_it_imports_no_execution_and_no_store_internals():
    """Each command calls one function below cli/ (commbench/running/, slurm/collect.py, ...) that does the work;
    no cli module imports the execution layer or the store's internals, at its top or inside a function."""
    sources = {_module_name(path): path.read_text(encoding="utf-8") for path in (PACKAGE / "cli").rglob("*.py")}
    assert len(sources) > 10 and "commbench.cli.perf" in sources
    assert _cli_breaches(sources) == []


def test_the_cli_check_finds_an_execution_import_or_a_store_internal():
    bad = {
        "commbench.cli.a": "from commbench.execution import torch_host\n",
        "commbench.cli.b": "def command():\n    from commbench.execution.session import run_bench\n",
        "commbench.cli.c": "def command():\n    import commbench.execution.stopping\n",
        "commbench.cli.d": "from commbench import execution\n",
        "commbench.cli.e": "def command():\n    from commbench.store import _lock\n",
        "commbench.cli.f": "from commbench import store\n\n\ndef command():\n    return store._lock\n",
    }
    assert _cli_breaches(bad) == [
        "commbench.cli.a imports commbench.execution.torch_host",
        "commbench.cli.b imports commbench.execution.session.run_bench",
        "commbench.cli.c imports commbench.execution.stopping",
        "commbench.cli.d imports commbench.execution",
        "commbench.cli.e imports commbench.store._lock",
        "commbench.cli.f reads store._lock",
    ]
    fine = {"commbench.cli.g": "from commbench.running.bench import run_bench_command\nfrom commbench import store\n"
                                "import commbench.executions_elsewhere\n\nstore.read_meta\n"}
    assert _cli_breaches(fine) == []


MAX_TOP_LEVEL_MODULES = 20


def test_at_most_twenty_top_level_modules():
    """commbench/ shows its architecture in folders; the modules left at its top are the shared base."""
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_the_package_graph_joins_modules_by_folder():
    graph = {"commbench.a.x": {"commbench.b.y"}, "commbench.b.y": {"commbench.c"}, "commbench.c": {"commbench.a.z"},
             "commbench.a.z": set(), "commbench": {"commbench.c"}}
    assert _package_graph(graph) == {"commbench.a": {"commbench.b"}, "commbench.b": {"commbench.c"},
                                     "commbench.c": {"commbench.a"}}
    assert _cycles(_package_graph(graph)) == [["commbench.a", "commbench.b", "commbench.c"]]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # importing a submodule from outside its package runs the package's __init__ first
    assert _outside_parents("commbench.benches.options", "commbench.execution.driver") == ["commbench.benches"]
    assert _outside_parents("commbench.benches.options", "commbench.benches.ddp") == []


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_every_kind_declares_what_the_harness_needs(kind: BenchKind):
    assert kind.name and kind.command and kind.title and kind.help().strip()
    assert COMMANDS[kind.command] is kind
    columns = set(kind.result_columns)
    assert {"schema_version", "run_id", "bench", "n_wrong"} <= columns
    assert set(kind.required_columns) <= columns and set(kind.identity) <= columns
    assert set(kind.comparability) <= columns and set(kind.sample_keys) <= columns
    assert set(kind.sample_keys) <= set(kind.sample_columns)
    for metric in kind.metrics:
        assert metric.column in columns
        assert metric.samples is None or metric.samples in kind.sample_columns
    assert kind.plots and all(plot.stem in DRAW for plot in kind.plots)  # each figure has its drawing
    assert issubclass(kind.options, TargetOptions)
    keys = [described.key for _, described in options_of(kind.options)]
    assert len(keys) == len(set(keys)) and set(TARGET_KEYS) <= set(keys)


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_the_command_line_is_made_from_the_options_dataclass(kind: BenchKind):
    command = main.commands[kind.command]
    flags = {opt for param in command.params if isinstance(param, click.Option) for opt in param.opts}
    arguments = {param.name for param in command.params if isinstance(param, click.Argument)}
    for field_, described in options_of(kind.options):
        assert field_.name in arguments if described.positional else described.flag in flags
    assert {"--out", "--run-id", "--quiet"} <= flags


@dataclass(frozen=True, kw_only=True)
class _EchoOptions(TargetOptions):
    message: str = option("--message", default="hi", help="What to echo.")
    repeat: tuple[int, ...] = option("--repeat", type=int, many=True, help="How often.")


class _EchoKind(BenchKind):
    """A toy kind, registered only inside a test."""

    name, command, title = "echo", "echo", "echo (commbench echo)"
    options = _EchoOptions

    def resolve(self, options, machine):
        target = resolve_target(machine, backend=options.backend, device=options.device, nproc=options.nproc)
        if any(count < 1 for count in options.repeat):
            raise CommbenchError("--repeat must be 1 or more")
        return Bench(self, (options.message, options.repeat, target.nproc), points=[])


def test_a_new_kind_is_one_class_and_a_registry_entry(monkeypatch, tmp_path):
    """Registered, a kind gets its command-line options and its suite keys, parsed and checked the same way."""
    kind = _EchoKind()
    monkeypatch.setitem(KINDS, kind.name, kind)
    monkeypatch.setitem(COMMANDS, kind.command, kind)
    machine = Machine(gpus=0, nccl_available=False)
    options = parse_options(kind.options, {"message": "yo", "repeat": ("1,2",), "nproc": "3"})
    assert kind.resolve(options, machine).spec == ("yo", (1, 2), 3)
    result = CliRunner().invoke(bench_command(kind), ["--help"])
    assert "--message" in result.output and "--repeat" in result.output and "--nproc" in result.output

    from commbench.suite.load import load_suite

    suite = tmp_path / "echo.toml"
    suite.write_text('nproc = 2\n[[bench]]\nkind = "echo"\nmessage = "from toml"\nrepeat = [3, 4]\n')
    assert load_suite(suite, machine).benches[0].bench.spec == ("from toml", (3, 4), 2)
    suite.write_text('[[bench]]\nkind = "echo"\nrepeat = [0]\n')
    with pytest.raises(CommbenchError, match="bench 'echo' \\(echo\\): --repeat must be 1 or more"):
        load_suite(suite, machine)
