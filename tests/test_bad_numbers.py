"""Generated bad input for every command's number, list and text options, on the command line and in a TOML suite:
each is refused with exit code 2 and one `commbench: error:` line naming the option, without a traceback, before
anything launches or a run folder is made.

The cases are made from the commands themselves (the Click parameters, and the bench kinds' options dataclasses
that carry each option's value type and minimum), so an option added later is covered without editing this file.
Everything runs in this process: a case that is refused costs milliseconds; one that is wrongly accepted would
launch ranks (and fail here on its exit code and the run folder it leaves).
"""

from dataclasses import dataclass

import click
import pytest

from commbench.benches import KINDS
from commbench.benches.options import TARGET_KEYS, Option, options_of
from commbench.cli import main
from commbench.machine import MAX_RANKS_PER_CORE, usable_cpus
from tests.refusals import assert_refused, invoke

NON_FINITE = ("nan", "inf", "-inf")
NOT_NUMBERS = ("", "abc")
BAD_SIZES = ("1K:1M:xnan", "1K:1M:xinf", "1K:1M:x1", "1:64M:+1", "1:1T:x1.0000001", "0:1K:x2", ",",
             "1K:1M:x-2", "1:2P:x2")
BAD_COUNTS = ("", "0", "-1", "nan", "inf", "abc")
"""--params: a parameter count."""
BAD_MEMORY = ("", "0GB", "-1GB", "nanGB", "80")
"""--memory-budget: memory with its unit."""
BAD_BATCH_CALLS = ("", "0", "-1", "nan", "1.5")
CPUS = usable_cpus()


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    names: str
    """What the one error line must name: the option's flag (or, in a suite, its key)."""
    kind: str
    """The class of bad value: non-finite, not-a-number, empty, zero, negative, below-minimum, ... (for the ids)."""

    @property
    def id(self) -> str:
        return " ".join(self.args)[:90]


def value_class(value: str) -> str:
    text = value.strip().lower()
    if ":" in text or text == ",":
        return "size-spec"
    if not text:
        return "empty"
    if text in NON_FINITE:
        return "non-finite"
    try:
        number = float(text)
    except ValueError:
        return "not-a-number"
    if number != int(number):
        return "fraction"
    return "zero" if number == 0 else "negative" if number < 0 else "out-of-range"


def bad_values(described: Option) -> tuple[str, ...]:
    """Values no bench option of this kind means: the class of each is what value_class() says."""
    if described.key == "sizes":
        return BAD_SIZES
    if described.key == "params":
        return BAD_COUNTS
    if described.key == "memory-budget":
        return BAD_MEMORY
    if described.key == "batch-calls":
        return BAD_BATCH_CALLS
    if described.key == "nproc":
        return ("0", "-1", "nan", "1.5", "", str(CPUS + 1), str(MAX_RANKS_PER_CORE * CPUS + 1), "10000")
    if described.type is float:
        values = (*NON_FINITE, *NOT_NUMBERS, "-1")
        return values + ("0",) if described.above_zero else values
    if described.type is int:
        values = ("", "abc", "1.5", "nan", "-1")
        return values + ("0",) if described.lowest is not None and described.lowest > 0 else values
    if described.type is bool or described.choices:
        return ("", "bogus")
    return ("",)


def bench_cases() -> list[Case]:
    """Every option of every bench command (sweep, ddp, fsdp, zero) with each of its bad values."""
    cases = []
    for kind in KINDS.values():
        for _, described in options_of(kind.options):
            if described.switch:
                continue
            for value in bad_values(described):
                ranks = int_or_none(value) if described.key == "nproc" else None
                # above the ceiling even --oversubscribe is refused; without it, the core count refuses first
                extra = ("--oversubscribe",) if ranks and ranks > MAX_RANKS_PER_CORE * CPUS else ()
                cases.append(Case((kind.command, f"{described.flag}={value}", *extra), described.flag,
                                  rank_class(value) if described.key == "nproc" else value_class(value)))
            if described.many:
                cases.append(Case((kind.command, f"{described.flag}=,"), described.flag, "empty-list"))
    return cases


def int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def rank_class(value: str) -> str:
    number = int_or_none(value)
    if number is not None and number > CPUS:
        return "ranks-above-cores" if number <= MAX_RANKS_PER_CORE * CPUS else "ranks-above-ceiling"
    return value_class(value)


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
ZERO_ALLOWED = {("model memory", "--param-bytes"), ("model memory", "--grad-bytes"),
                ("model memory", "--optim-bytes"), ("model comm", "--alpha-us"), ("slurm submit", "--gpus-per-node"),
                ("compare", "--launch-noise")}
"""Number options of those commands for which 0 means something (no optimizer state, no latency, CPU nodes, no
launch-noise floor)."""
TEXT_NUMBERS = {("model memory", "--params"): BAD_COUNTS, ("model comm", "--params"): BAD_COUNTS,
                ("model memory", "--fit"): BAD_MEMORY,
                ("compare", "--fail"): ("busbw:nan%", "busbw:inf%", "busbw:-5%", "busbw:", "busbw:abc%")}
"""Text options that hold numbers."""


def click_commands():
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            yield from ((f"{name} {sub}", sub_command) for sub, sub_command in command.commands.items())
        elif name not in {kind.command for kind in KINDS.values()}:
            yield name, command


def click_cases() -> list[Case]:
    """Every number option of the commands whose options are plain Click ones (run, selftest, model, compare,
    slurm submit), with each bad value its type allows; TEXT_NUMBERS for text options that hold numbers."""
    cases = []
    for name, command in click_commands():
        if name not in BASE_ARGS:
            continue
        for param in command.params:
            if not isinstance(param, click.Option) or param.is_flag:
                continue
            flag = max(param.opts, key=len)
            if (name, flag) in TEXT_NUMBERS:
                values = TEXT_NUMBERS[name, flag]
            elif isinstance(param.type, click.types.IntParamType):
                values = ("", "abc", "1.5", "-1") + (() if (name, flag) in ZERO_ALLOWED else ("0",))
            elif isinstance(param.type, click.types.FloatParamType) or param.type.name == "number":
                values = (*NON_FINITE, *NOT_NUMBERS, "-1") + (() if (name, flag) in ZERO_ALLOWED else ("0",))
            else:
                continue
            base = without_option(BASE_ARGS[name], flag)
            for value in values:
                extra = ("--bw-gbps", "10") if flag == "--alpha-us" else ("--alpha-us", "5") \
                    if flag == "--bw-gbps" else ()
                cases.append(Case((*name.split(), *base, *extra, f"{flag}={value}"), flag, value_class(value)))
    return cases


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


def toml_literal(value: str) -> str:
    """How a suite writes the value: numbers and nan/inf bare (TOML has them), anything else as a string."""
    try:
        float(value)
    except ValueError:
        return '"' + value + '"'
    return value if value.strip() and not value.startswith("+") else '"' + value + '"'


def suite_cases() -> list[tuple[str, str, str]]:
    """(suite text, key, class): every bench option's bad values as suite keys, and the target's at the top."""
    cases = []
    for kind in KINDS.values():
        for _, described in options_of(kind.options):
            if described.switch:
                continue
            if described.key in TARGET_KEYS:
                for value in bad_values(described):
                    text = f"{described.key} = {toml_literal(value)}\n[[bench]]\nkind = \"{kind.command}\"\n"
                    cases.append((text, described.key, rank_class(value)))
                continue
            for value in bad_values(described):
                text = f"[[bench]]\nkind = \"{kind.command}\"\n{described.key} = {toml_literal(value)}\n"
                cases.append((text, described.key, value_class(value)))
            if described.many:
                cases.append((f"[[bench]]\nkind = \"{kind.command}\"\n{described.key} = []\n", described.key,
                               "empty-list"))
    return cases


BENCH_CASES, CLICK_CASES, SUITE_CASES = bench_cases(), click_cases(), suite_cases()
@pytest.mark.parametrize("case", BENCH_CASES + CLICK_CASES,
                         ids=lambda case: f"{case.kind}: {case.id}")
def test_a_bad_option_value_is_refused_before_anything_runs(case, tmp_path):
    out = tmp_path / "results"
    args = list(case.args)
    if args[0] in {kind.command for kind in KINDS.values()} | {"run", "selftest"}:
        args += ["--out", str(out)]
    line = assert_refused(invoke(args, cwd=tmp_path), left_empty=(out, tmp_path / "results"))
    assert case.names in line, line


@pytest.mark.parametrize("text, key, kind", SUITE_CASES,
                         ids=lambda value: value.replace("\n", " ")[:70] if isinstance(value, str) else value)
def test_a_bad_suite_value_is_refused_before_anything_runs(text, key, kind, tmp_path):
    suite = tmp_path / "bad.toml"
    suite.write_text(text)
    out = tmp_path / "results"
    line = assert_refused(invoke(["run", str(suite), "--out", str(out)], cwd=tmp_path), left_empty=(out,))
    assert f"'{key}'" in line or f"--{key}" in line, line


def test_the_table_covers_every_class_and_every_number_option():
    """The generator itself: a bench option of each type, every class of bad value, the big --nproc values."""
    classes = {case.kind for case in BENCH_CASES + CLICK_CASES} | {kind for _, _, kind in SUITE_CASES}
    assert {"non-finite", "not-a-number", "empty", "zero", "negative", "fraction", "empty-list",
            "ranks-above-cores", "ranks-above-ceiling"} <= classes
    flags = {case.names for case in BENCH_CASES + CLICK_CASES}
    assert {"--lr", "--timeout", "--target-ci", "--gpu-sample-interval", "--bucket-cap-mb", "--heads", "--layers",
            "--seq-len", "--micro-batch", "--params", "--collective", "--sizes", "--nproc", "--step-timeout",
            "--fail", "--param-bytes", "--dtype-bytes", "--bw-gbps"} <= flags
