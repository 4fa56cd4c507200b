"""What a rank other than 0 returns from a command's work: light, so that the commands that print it load no more
than this to tell it apart (`commbench --help` imports every command)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commbench.errors import ExitCode

if TYPE_CHECKING:
    from commbench.execution.session import Ran


@dataclass(frozen=True)
class OtherRank:
    """This process is a rank other than 0 inside a job: rank 0 reports for everyone, and this rank exits as the job
    ended (the same code on every rank, see session.Ran)."""

    exit_code: ExitCode


def other_rank(ran: Ran) -> OtherRank:
    return OtherRank(ExitCode.RUN_FAILED if not ran else ExitCode.WRONG_RESULTS if ran.problems else ExitCode.OK)
