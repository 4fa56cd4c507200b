"""Whether one measured size of one group earns a tuner line: it must have a winner beyond noise, be measured with
NCCL's own collective (the rows of another backend or of commbench's hand-written ring say nothing about NCCL's
algorithms), and its winning environment must be one the plugin can express (plugin.py)."""

from dataclasses import dataclass

from commbench.names import BUILTIN, NCCL
from commbench.sweep.env_axes import NCCL_ALGO, NCCL_PROTO, parse_label
from commbench.tune.decisions import ALONE, TIE, Group, SizeDecision
from commbench.tune.plugin import expressed, plugin_name


@dataclass(frozen=True)
class Verdict:
    choice: tuple[str, str] | None
    """(algorithm, protocol) as the plugin spells them; None: no line for this size."""
    short: str
    """What the table's `choice` column says."""
    why_no_line: str = ""
    notes: tuple[str, ...] = ()


def verdict(group: Group, decision: SizeDecision) -> Verdict:
    collective = group.key["collective"]
    if plugin_name(collective) is None:  # whatever was measured: the plugin would apply the line to allreduce
        return Verdict(None, "- not in plugin", expressed(collective, "").why_no_line)
    if decision.outcome == ALONE:
        return Verdict(None, "- alone", "fewer than two settings measured here (the others were refused or not "
                                        "measured): nothing to compare")
    if decision.outcome == TIE:
        return Verdict(None, "- tie", "no setting wins beyond noise: NCCL keeps deciding")
    if group.key["backend"] != NCCL:
        # an NCCL_* variable changes nothing on another backend: whatever margin there is, it is not NCCL's doing
        return Verdict(None, f"- {group.key['backend']}", f"measured on {group.key['backend']}, which NCCL's tuner "
                                                          "never sees: no NCCL setting follows from these rows")
    if group.key["impl"] != BUILTIN:
        return Verdict(None, f"- impl {group.key['impl']}", f"impl {group.key['impl']} is commbench's own "
                                                            f"collective over send/recv, not NCCL's {collective}")
    winner = decision.best
    assert winner is not None  # a decided size has two candidates or more
    found = expressed(collective, winner.env)
    notes = list(found.notes)
    if found.choice is not None and all(_forces_a_choice(candidate.env) for candidate in decision.ranked):
        notes.append("NCCL's own choice (the default environment) was not measured at this size: the line forces "
                     "the best measured setting, which NCCL's own choice might beat")
    if found.choice is None:
        short = "- default" if not winner.env else "- not expressible"
        return Verdict(None, short, found.why_no_line, tuple(notes))
    return Verdict(found.choice, f"{plugin_name(collective)} {found.choice[0]}/{found.choice[1]}", "", tuple(notes))


def _forces_a_choice(env: str) -> bool:
    """The env sets NCCL_ALGO or NCCL_PROTO: NCCL did not choose for itself."""
    return bool({NCCL_ALGO, NCCL_PROTO} & set(parse_label(env)))
