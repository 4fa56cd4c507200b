"""The values a training command's --help offers on its axes, read from the options the command line is generated
from, so a new choice or true/false option joins each axis table by itself."""

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
