"""Bad numbers, lists and choices are refused with exit code 2 and one `commbench: error:` line naming the option (or,
in a suite, its key), without a traceback, before anything launches or a run folder is made.

A rule is tested once per place a value can enter, not for every option that shares it:
- every bench command's options (sweep, ddp, fsdp, zero, hunt, p2p, replay) are read by one function,
  parse_options (commbench/benches/options.py), from the command line and from a suite alike: each of its rules is
  a row of PARSE_RULES, run once as an option and once as a suite key (the target keys, at a suite's top);
- the bench kinds' own checks (--sizes, --params, --memory-budget, --batch-calls, --steps, ranks against cores) are
  each a row of KIND_RULES, as an option;
- every number option of the other commands (run, selftest, model, compare, expect, slurm submit) has a check of its
  own (its Click type, or the command's code): one out-of-range value each, generated from the commands, so an option
  added later is covered without editing this file; CLICK_TYPE_RULES holds each further branch of those checks once.
Everything runs in this process: a case that is refused costs milliseconds; one that is wrongly accepted would launch
ranks (and fail here on its exit code and the run folder it leaves).
"""

from dataclasses import dataclass

import click
import pytest

from commbench.cli import main
from commbench.machine import MAX_RANKS_PER_CORE, usable_cpus
from tests.refusals import assert_refused, invoke

CPUS = usable_cpus()
BENCH_COMMANDS = {"sweep", "ddp", "fsdp", "zero", "hunt", "p2p", "replay"}


@dataclass(frozen=True)
class Rule:
    rule: str
    """The rule the row stands for (its test id)."""
    command: str
    key: str
    """The option without its dashes: the suite key."""
    value: str
    toml: str | None = None
    """How a suite writes the value, where it is not the value itself as a TOML string (numbers, nan and inf bare)."""
    extra: tuple[str, ...] = ()
    """Further options the case needs (--oversubscribe), or `key = value` lines at the suite's top."""
    top: bool = False
    """A target key (backend, device, nproc): in a suite it belongs at the top, not in a [[bench]]."""


PARSE_RULES = [
    Rule("a value given empty", "sweep", "iters", ""),
    Rule("a repeatable option that names no value (in a suite: an empty list)", "sweep", "collective", ",", toml="[]"),
    Rule("each value of a repeatable option is checked", "ddp", "accum-steps", "1,0", toml="[1, 0]"),
    Rule("each number of a repeatable number option is checked", "ddp", "first-bucket-mb", "25,nan", toml="[25, nan]"),
    Rule("a repeatable option that names no value, as the comma form (in a suite: a string)", "sweep", "dtype", ","),
    Rule("a text option given empty", "sweep", "sizes", ""),
    Rule("a true/false option given neither", "ddp", "static-graph", "bogus"),
    Rule("a whole-number option given a fraction", "sweep", "iters", "1.5", toml="1.5"),
    Rule("a whole-number option given NaN", "sweep", "warmup", "nan", toml="nan"),
    Rule("a number option given text", "sweep", "timeout", "abc"),
    Rule("a number option given NaN", "sweep", "timeout", "nan", toml="nan"),
    Rule("a number option given infinity", "hunt", "threshold", "inf", toml="inf"),
    Rule("a choice option given another word", "sweep", "dtype", "bogus"),
    Rule("a whole number below its lowest", "sweep", "iters", "0", toml="0"),
    Rule("a whole number below 0 where 0 is its lowest", "sweep", "warmup", "-1", toml="-1"),
    Rule("a number that must be above 0 given 0", "sweep", "timeout", "0", toml="0"),
    Rule("a number below its lowest", "hunt", "min-z", "-1", toml="-1"),
    Rule("a target key given a bad value (at the suite's top)", "sweep", "backend", "bogus", top=True),
    Rule("a rank count of 0 (at the suite's top)", "sweep", "nproc", "0", toml="0", top=True),
]
"""parse_options' rules (commbench/benches/options.py: _value_text, _convert, _boolean, _whole_number,
_finite_number, _choice, _in_range) and the rank count's (commbench/machine.py), each as an option and as a suite
key."""

KIND_RULES = [
    *(Rule(f"--sizes: {why}", "sweep", "sizes", value) for why, value in (
        ("a factor that is not a finite number", "1K:1M:xnan"), ("a factor of 1 never grows", "1K:1M:x1"),
        ("a step that makes too many sizes", "1:64M:+1"), ("a factor that makes too many sizes", "1:1T:x1.0000001"),
        ("a minimum of 0", "0:1K:x2"), ("no size at all", ","), ("a size above 1 PiB", "1:2P:x2"))),
    Rule("--sizes of p2p is read by the same rules", "p2p", "sizes", "1K:1M:xnan"),
    Rule("--batch-calls that is not a whole number", "sweep", "batch-calls", "nan"),
    Rule("--batch-calls below 1", "sweep", "batch-calls", "0"),
    Rule("--memory-budget without its unit", "ddp", "memory-budget", "80"),
    Rule("--memory-budget of 0", "fsdp", "memory-budget", "0GB"),
    Rule("--params that is not a count", "zero", "params", "nan"),
    Rule("--params of 0", "ddp", "params", "0"),
    Rule("--bucket-cap-mb that is neither a number nor `default`", "ddp", "bucket-cap-mb", "abc"),
    # the training kinds each plan their configurations (their own code) before --steps is checked
    *(Rule("--steps below 0", kind, "steps", "-1") for kind in ("ddp", "fsdp", "zero")),
    Rule("--warmup-steps below 0", "fsdp", "warmup-steps", "-1"),
    # each bench kind resolves its ranks in its own resolve(): once per kind
    *(Rule("a rank count of 0", kind, "nproc", "0") for kind in ("ddp", "fsdp", "zero", "hunt", "p2p", "replay")),
    Rule("more ranks than cores", "sweep", "nproc", str(CPUS + 1)),
    Rule("more ranks than --oversubscribe allows", "ddp", "nproc", str(MAX_RANKS_PER_CORE * CPUS + 1),
         extra=("--oversubscribe",)),
    Rule("an option that takes arguments on the command line has no flag there", "replay", "trace", ""),
]
"""The bench kinds' own checks of one value (commbench/units.py, the kinds' resolve(), commbench/machine.py), each
on the command line; a suite reaches them through the same resolve() (one row of SUITE_ONLY shows it)."""

SUITE_ONLY = [
    Rule("a bench kind's own check reached from a suite", "sweep", "sizes", "0:1K:x2"),
    Rule("more ranks than --oversubscribe allows (at the suite's top)", "sweep", "nproc",
         str(MAX_RANKS_PER_CORE * CPUS + 1), toml=str(MAX_RANKS_PER_CORE * CPUS + 1),
         extra=("oversubscribe = true",), top=True),
]


@pytest.fixture(scope="module")
def torch_loaded():
    """torch imported in this process, as a program that calls the CLI has it: a bench command then reads the machine
    here instead of forking a process that imports torch (~3 s of a core per case) before it reads its options."""
    import torch  # noqa: F401


def _refused_option(rule: Rule, tmp_path) -> str:
    out = tmp_path / "results"
    args = [rule.command, f"--{rule.key}={rule.value}", *rule.extra, "--out", str(out)]
    return assert_refused(invoke(args, cwd=tmp_path), left_empty=(out,))


def _refused_suite(rule: Rule, tmp_path) -> str:
    value = rule.toml if rule.toml is not None else f'"{rule.value}"'
    bench = f'[[bench]]\nkind = "{rule.command}"\n'
    top = "".join(f"{line}\n" for line in rule.extra)
    text = top + (f"{rule.key} = {value}\n{bench}" if rule.top else f"{bench}{rule.key} = {value}\n")
    suite = tmp_path / "bad.toml"
    suite.write_text(text)
    out = tmp_path / "results"
    return assert_refused(invoke(["run", str(suite), "--out", str(out)], cwd=tmp_path), left_empty=(out,))


def test_a_bench_command_refuses_through_the_torch_host(tmp_path):
    """As `commbench` runs it: the command reads its options once a torch host has reported the machine (in the
    suite the host this worker keeps, tests/conftest.py; where none is kept and torch is loaded, the in-process path
    the tables below take)."""
    assert "--iters" in _refused_option(Rule("", "sweep", "iters", "0"), tmp_path)
    assert "'iters'" in _refused_suite(Rule("", "sweep", "iters", "0", toml="0"), tmp_path)


@pytest.mark.usefixtures("torch_loaded")
@pytest.mark.parametrize("rule", PARSE_RULES + KIND_RULES, ids=lambda rule: f"{rule.rule}: {rule.command} "
                                                                             f"--{rule.key}={rule.value}")
@pytest.mark.no_process
def test_a_bad_option_value_is_refused_before_anything_runs(rule, tmp_path):
    line = _refused_option(rule, tmp_path)
    assert f"--{rule.key}" in line, line


@pytest.mark.usefixtures("torch_loaded")
@pytest.mark.parametrize("rule", PARSE_RULES + SUITE_ONLY, ids=lambda rule: f"{rule.rule}: {rule.key}")
@pytest.mark.no_process
def test_a_bad_suite_value_is_refused_before_anything_runs(rule, tmp_path):
    line = _refused_suite(rule, tmp_path)
    assert f"'{rule.key}'" in line or f"--{rule.key}" in line, line


# --- the other commands' number options: plain Click options ----------------------------------------------------------

BASE_ARGS = {
    "run": ("cpu-ci",),
    "selftest": (),
    "model memory": ("--params", "7B", "--ranks", "8"),
    "model comm": ("--params", "7B", "--ranks", "8", "--alpha-us", "5", "--bw-gbps", "10"),
    "compare": ("baseline-run", "new-run"),
    "expect": ("--machine", "dgx-h100"),
    "slurm submit": ("cpu-ci", "--nodes", "1", "--gpus-per-node", "0", "--dry-run"),
}
"""The other commands with good values for what they require; the bad value replaces the option's own."""
TEXT_NUMBERS = {("model memory", "--params"): "-1", ("model comm", "--params"): "-1",
                ("model memory", "--fit"): "-1GB", ("compare", "--fail"): "busbw:-5%"}
"""Text options that hold numbers, with a negative value of each."""


def click_commands():
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            yield from ((f"{name} {sub}", sub_command) for sub, sub_command in command.commands.items())
        elif name not in BENCH_COMMANDS:
            yield name, command


def number_options() -> list[tuple[str, str, str]]:
    """(command, flag, a negative value): every number option of the commands in BASE_ARGS, and TEXT_NUMBERS. -1 is
    below what each means (a count, a duration, a rate, a port), and each refuses it by its own check."""
    found = []
    for name, command in click_commands():
        if name not in BASE_ARGS:
            continue
        for param in command.params:
            if not isinstance(param, click.Option) or param.is_flag:
                continue
            flag = max(param.opts, key=len)
            if (name, flag) in TEXT_NUMBERS:
                found.append((name, flag, TEXT_NUMBERS[name, flag]))
            elif isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)) or \
                    param.type.name == "number":
                found.append((name, flag, "-1"))
    return found


CLICK_TYPE_RULES = [
    ("POSITIVE_NUMBER: text (Click's FLOAT)", "slurm submit", "--poll", "abc"),
    ("POSITIVE_NUMBER: NaN, which Click's FLOAT takes", "slurm submit", "--wait-timeout", "nan"),
    ("POSITIVE_NUMBER: 0", "slurm submit", "--poll", "0"),
    ("a whole-number option given a fraction (Click's INT)", "slurm submit", "--nodes", "1.5"),
    ("a whole-number option given empty (Click's INT)", "run", "--nproc", ""),
    ("a count of 0", "model memory", "--ranks", "0"),
    ("selftest's own check of a float: NaN", "selftest", "--step-timeout", "nan"),
    ("--params: text", "model comm", "--params", "abc"),
    ("--params: 0", "model memory", "--params", "0"),
    ("--fit: no unit", "model memory", "--fit", "80"),
    ("--fit: 0", "model memory", "--fit", "0GB"),
    ("--fail: no percentage", "compare", "--fail", "busbw:"),
    ("--fail: text", "compare", "--fail", "busbw:abc%"),
    ("--fail: NaN", "compare", "--fail", "busbw:nan%"),
]
"""Each further branch of those options' checks (commbench/cli/shared.py's _FiniteNumber, Click's INT, the
commands' own checks, commbench/units.py, commbench/gate/thresholds.py), once."""
CLICK_CASES = [pytest.param(name, flag, value, id=f"every option: {name} {flag}={value}")
               for name, flag, value in number_options()]
CLICK_CASES += [pytest.param(name, flag, value, id=f"{rule}: {name} {flag}={value}")
                for rule, name, flag, value in CLICK_TYPE_RULES]


def without_option(args: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """args without `flag VALUE` (and the partner that must go with --alpha-us/--bw-gbps)."""
    dropped = {flag} | ({"--alpha-us", "--bw-gbps"} if flag in ("--alpha-us", "--bw-gbps") else set())
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in dropped:
            skip = True
        else:
            kept.append(arg)
    return tuple(kept)


@pytest.mark.parametrize("name, flag, value", CLICK_CASES)
@pytest.mark.no_process
def test_a_bad_number_of_another_command_is_refused(name, flag, value, tmp_path):
    partner = {"--alpha-us": ("--bw-gbps", "10"), "--bw-gbps": ("--alpha-us", "5")}.get(flag, ())
    args = [*name.split(), *without_option(BASE_ARGS[name], flag), *partner, f"{flag}={value}"]
    out = tmp_path / "results"
    if name in ("run", "selftest"):
        args += ["--out", str(out)]
    line = assert_refused(invoke(args, cwd=tmp_path), left_empty=(out,))
    assert flag in line, line


@pytest.mark.no_process
def test_the_tables_cover_every_kind_of_option_and_every_number_option():
    """The generator and the rule tables themselves: a bench option of each type is in a rule, and the other
    commands' number options are found (an empty list would pass everything)."""
    from commbench.benches import KINDS
    from commbench.benches.options import options_of

    flags = {flag for _, flag, _ in number_options()}
    assert {"--step-timeout", "--fail", "--param-bytes", "--dtype-bytes", "--bw-gbps", "--launch-noise",
            "--wait-timeout", "--rdzv-port", "--nodes", "--launches", "--ranks-per-node"} <= flags
    options = {described.key: described for kind in KINDS.values() for _, described in options_of(kind.options)}
    kinds = {(options[rule.key].type, bool(options[rule.key].many), bool(options[rule.key].choices))
             for rule in PARSE_RULES}
    declared = {(described.type, bool(described.many), bool(described.choices)) for described in options.values()
                if not described.switch and described.parse is None and described.type is not str}
    assert declared <= kinds, declared - kinds
