"""Slurm hostlist expressions (`n[3,7]`, `gpu[01-02,10]`): how a set of suspect nodes is handed to
`sbatch --exclude`.

Names that end in digits are grouped by what comes before the digits; digits with a leading zero keep their width
(`gpu01` is not `gpu1`), digits without one are plain numbers (`n9` and `n10` make `n[9-10]`), as Slurm reads them.
Other names stay as they are. The expression expands (`scontrol show hostnames`) to exactly the given names; it can
differ in form from `scontrol show hostlistsorted`, which tests/test_cluster_helpers.py checks against."""

import re

_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<digits>\d+)$")


def compress(names: list[str]) -> str:
    """One hostlist expression for these names (duplicates once), groups sorted by prefix."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for name in names:
        match = _NUMBERED.match(name)
        if not name or any(character in name for character in ",[]"):
            raise ValueError(f"{name!r} is not a host name")
        if match is None:
            plain.add(name)
            continue
        digits = match["digits"]
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0  # 0: a plain number
        groups.setdefault((match["prefix"], width), set()).add(int(digits))
    parts = [(name, name) for name in plain]
    for (prefix, width), numbers in groups.items():
        ranges = number_ranges(sorted(numbers), width)
        text = f"{prefix}{ranges[0]}" if len(ranges) == 1 and "-" not in ranges[0] else f"{prefix}[{','.join(ranges)}]"
        parts.append((prefix, text))
    return ",".join(text for _, text in sorted(parts))


def number_ranges(numbers: list[int], width: int = 0) -> list[str]:
    """Runs of consecutive numbers as spans, in the order given: 0,1,2,5 → 0-2, 5 (each zero-filled to width)."""
    spans: list[list[int]] = []
    for number in numbers:
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    return [_span(low, high, width) for low, high in spans]


def _span(low: int, high: int, width: int) -> str:
    low_text, high_text = str(low).zfill(width), str(high).zfill(width)  # zfill(0) leaves a plain number as it is
    return low_text if low == high else f"{low_text}-{high_text}"
