"""The `commbench` command group; user errors become one line on stderr and exit code 2, never a traceback.

Importing the CLI loads no torch, pandas, scipy or matplotlib (a command loads what it uses when it runs), so
`commbench --help` and the analytic `commbench model` commands start at once.
"""

import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from commbench import __version__, srun_ranks
from commbench.benches import KINDS
from commbench.cli.bench import bench_command
from commbench.cli.compare import compare_command
from commbench.cli.env import env
from commbench.cli.expect import expect
from commbench.cli.export import export_group
from commbench.cli.fit import fit
from commbench.cli.import_results import import_group
from commbench.cli.k8s import k8s
from commbench.cli.model import model
from commbench.cli.perf import perf
from commbench.cli.report import report
from commbench.cli.run import run
from commbench.cli.selftest import selftest
from commbench.cli.shared import warnings_held
from commbench.cli.slurm import slurm
from commbench.cli.suites import suites
from commbench.cli.trace import trace
from commbench.cli.tune import tune
from commbench.errors import CommbenchError, ExitCode
from commbench.running.lifetime import command_running, interrupted, stop_of, the_program


class _OneLineErrors(click.Group):
    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        """The command, with every failure as one line on stderr and its exit code (always standalone: click's
        standalone_mode is ignored)."""
        with warnings_held() as held:
            try:
                with command_running():  # stop signals raised within; the command's torch host closed after it
                    return super().main(args=args, prog_name=prog_name or "commbench", complete_var=complete_var,
                                        standalone_mode=False, windows_expand_args=windows_expand_args, **extra)
            except CommbenchError as error:
                if error.exit_code == ExitCode.BAD_INPUT:
                    held.pending.clear()  # refused: the one line is the refusal
                _fail(str(error), error.exit_code)
            except click.UsageError as error:
                held.pending.clear()
                where = error.ctx.command_path if error.ctx else "commbench"
                _fail(f"{_without_hidden_guesses(error).format_message()} (see `{where} --help`)",
                      ExitCode.BAD_INPUT)
            except click.ClickException as error:
                _fail(error.format_message(), error.exit_code)
            except click.Abort:
                _fail(interrupted().message, interrupted().exit_code, prefix="commbench:")
            except BaseException as error:  # a stop signal's, or Ctrl-C's; anything else (SystemExit) goes on
                stop = stop_of(error)
                if stop is None:
                    raise
                _fail(stop.message, stop.exit_code, prefix="commbench:")
            finally:
                held.show()  # those that no command showed before its output (e.g. a Slurm submit's suite)


def _without_hidden_guesses(error: click.UsageError) -> click.UsageError:
    """Click guesses a misspelt option among all the command's options, hidden ones too (`run --int` → "Did you
    mean --into?", an option for the Slurm job script only): guess among the visible ones, as --help lists them."""
    if not isinstance(error, click.NoSuchOption) or not error.possibilities or error.ctx is None:
        return error
    visible = [name for param in error.ctx.command.get_params(error.ctx)
               if isinstance(param, click.Option) and not param.hidden
               for name in (*param.opts, *param.secondary_opts) if name.startswith("--")]
    guesses = difflib.get_close_matches(error.option_name, visible) or None
    return click.NoSuchOption(error.option_name, error.message, possibilities=guesses, ctx=error.ctx)


def _fail(message: str, code: int, *, prefix: str = "commbench: error:") -> NoReturn:
    click.echo(f"{prefix} {message}", err=True)
    sys.exit(code)


@click.group(name="commbench", cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def main() -> None:
    """Collective-communication benchmarks for PyTorch distributed: measure, verify, store."""


for _kind in KINDS.values():  # one command per registered bench kind
    main.add_command(bench_command(_kind))
for _command in (perf, run, suites, selftest, env, expect, trace, model, fit, compare_command, report, import_group,
                 slurm, k8s, tune, export_group):
    main.add_command(_command)


def program() -> None:
    """The `commbench` script and `python -m commbench`: the process ends with the command, so it takes the stop
    signals for the whole of its life (stopping.as_the_program()); a rank run in place leaves them to its launcher."""
    srun_ranks.adopt()  # an srun step's task becomes its rank (RANK, WORLD_SIZE, ...) before anything reads them
    with the_program():
        main()
