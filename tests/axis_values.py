"""The values a training command's --help offers on its axes, read from the options the command line is generated
from, so a new choice or true/false option joins each axis table by itself; and those values packed into as few tiny
benches as still run each of them as its own bench would."""

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from commbench.benches.options import options_of


def offered_values(options, *, skip=None, listed=()) -> list[tuple[str, str]]:
    """(option key, value): `listed` first (values of options without fixed choices, as their help names them), then
    each choice of an option with choices and true and false of each true/false option; options of the `skip`
    options class (e.g. where to run, or what every training sweep shares) are left out."""
    skipped = {f.name for f, _ in options_of(skip)} if skip is not None else set()
    values = list(listed)
    for f, described in options_of(options):
        if f.name in skipped:
            continue
        if described.choices:
            values += [(described.key, choice) for choice in described.choices]
        elif described.type is bool and not described.switch:
            values += [(described.key, "true"), (described.key, "false")]
    return list(dict.fromkeys(values))


AxisValue = tuple[str, str]
"""(option key, value), as offered_values gives it."""


@dataclass(frozen=True)
class Resolved:
    """A tiny bench as packing compares it: each configuration's fields (with the model shape and isolation it runs
    on, which make the run as much as the fields do), each configuration's label, the notes printed with it, and
    whether it launches alone (a process per configuration)."""

    configs: tuple[dict, ...]
    labels: tuple[str, ...]
    notes: frozenset[str]
    alone: bool


def resolved_for_packing(bench) -> Resolved:
    """The Resolved of a training bench (what a kind's resolve() returns)."""
    spec = bench.spec
    return Resolved(configs=tuple({**dataclasses.asdict(config), "shape": spec.shape, "isolation": spec.isolation}
                                  for config in spec.configs),
                    labels=tuple(config.label() for config in spec.configs), notes=frozenset(bench.notes),
                    alone=bench.process_per_point)


Resolve = Callable[[dict[str, str]], "Resolved | str"]
"""The tiny bench that sets these options (by field name) over the test's base values, or its refusal's message."""


@dataclass(frozen=True)
class Pack:
    """Axis values that run together as one tiny bench: the options it sets (each value's own and what each needs),
    its one configuration's label, and whether it launches alone."""

    values: tuple[AxisValue, ...]
    settings: dict[str, str]
    label: str
    alone: bool

    def __str__(self) -> str:
        return f"{' '.join(f'--{key} {value}' for key, value in self.values)} [{self.label}]"


def packed(values: Iterable[AxisValue], *, settings_of: Callable[[str, str], dict[str, str]],
           resolve: Resolve) -> list[Pack]:
    """Runnable axis values packed greedily, first fit: a value joins the first pack it keeps (_Packing.joined), else
    starts one; values that set the most options go first (ties in table order), since they are the hardest to fit
    and so seed the packs the others join. The packs that launch alone (a process per configuration) come last, so
    that the others share one launch before them. `settings_of(key, value)`: the options that value's own bench sets
    over the base values."""
    most_settings_first = sorted(values, key=lambda value: -len(settings_of(*value)))
    packing = _Packing.of(most_settings_first, settings_of, resolve)
    packs: list[Pack] = []
    for value in packing.singles:
        for index, pack in enumerate(packs):
            joined = packing.joined(pack, value)
            if joined:
                packs[index] = joined
                break
        else:
            packs.append(packing.by_itself(value))
    return sorted(packs, key=lambda pack: pack.alone)


def _one_configuration(resolved: "Resolved | str", what) -> Resolved:
    assert not isinstance(resolved, str), (what, resolved)
    assert len(resolved.configs) == 1, (what, resolved.labels)
    return resolved


@dataclass(frozen=True)
class _Packing:
    """What packing compares a pack with: each value's own bench and the fields it moved off the base bench's."""

    settings_of: Callable[[str, str], dict[str, str]]
    resolve: Resolve
    singles: dict[AxisValue, Resolved]
    moved: dict[AxisValue, dict]

    @classmethod
    def of(cls, values: list[AxisValue], settings_of, resolve: Resolve) -> "_Packing":
        base = _one_configuration(resolve({}), "the base values").configs[0]
        singles = {value: _one_configuration(resolve(settings_of(*value)), value) for value in values}
        moved = {value: {name: held for name, held in single.configs[0].items() if base[name] != held}
                 for value, single in singles.items()}
        return cls(settings_of, resolve, singles, moved)

    def by_itself(self, value: AxisValue) -> Pack:
        single = self.singles[value]
        return Pack((value,), self.settings_of(*value), single.labels[0], single.alone)

    def joined(self, pack: Pack, value: AxisValue) -> Pack | None:
        """The pack with the value added, or None where that would not run each value as its own bench does: a
        value of a process per configuration only joins such values (and the other way round); none of its options
        (its own or one it needs, such as FSDP1's --impl) may be set otherwise in the pack (a value of the base, such
        as --impl fsdp2, moves no field, so only its setting shows it); and the joined bench must resolve to one
        configuration, with no note that none of its values' own benches printed (a value merged into another
        configuration says so in a note) and every field each value's own bench moved off the base."""
        settings = self.settings_of(*value)
        if self.singles[value].alone != pack.alone or any(pack.settings.get(option, set_to) != set_to
                                                          for option, set_to in settings.items()):
            return None
        values, settings = (*pack.values, value), {**pack.settings, **settings}
        together = self.resolve(settings)
        if isinstance(together, str) or len(together.configs) != 1 or together.alone != pack.alone:
            return None
        if not together.notes <= frozenset().union(*(self.singles[each].notes for each in values)):
            return None
        fields = together.configs[0]
        if any(fields[name] != held for each in values for name, held in self.moved[each].items()):
            return None
        return Pack(values, settings, together.labels[0], pack.alone)


def bench_toml(name: str, kind: str, options, values: dict[str, str]) -> str:
    """A suite's [[bench]] table that sets these options (by field name, as parse_options takes them) by their keys."""
    keys = {f.name: described.key for f, described in options_of(options)}
    return (f'[[bench]]\nname = "{name}"\nkind = "{kind}"\n'
            + "".join(f'{keys[option]} = "{value}"\n' for option, value in values.items()))


def by_bench_name(packs: list[Pack]) -> dict[str, Pack]:
    """The packs by the suite bench name each runs as (p0, p1, ... in launch order)."""
    return {f"p{index}": pack for index, pack in enumerate(packs)}


def launch_failed(stderr: str, benches: dict[str, Pack]) -> str:
    """A failed launch's message: what it printed last, and the values and configuration of each bench it names."""
    return stderr[-3000:] + "\nbenches:\n" + "\n".join(f"{name}: {pack}" for name, pack in benches.items())
