"""The `commbench` command group; user errors become one line on stderr and exit code 2, never a traceback."""

import sys

import click

from commbench import __version__
from commbench.errors import CommbenchError


class _OneLineErrors(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            return super().main(args=args, prog_name=prog_name or "commbench", standalone_mode=False, **extra)
        except CommbenchError as error:
            _fail(str(error), error.exit_code)
        except click.UsageError as error:
            where = error.ctx.command_path if error.ctx else "commbench"
            _fail(f"{error.format_message()} (see `{where} --help`)", 2)
        except click.ClickException as error:
            _fail(error.format_message(), error.exit_code)
        except click.Abort:
            _fail("aborted", 130)


def _fail(message: str, code: int) -> None:
    click.echo(f"commbench: error: {message}", err=True)
    sys.exit(code)


@click.group(name="commbench", cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="commbench")
def main() -> None:
    """Collective-communication benchmarks for PyTorch distributed: measure, verify, store."""


def _register() -> None:
    from commbench.cli.compare import compare_command
    from commbench.cli.env import env
    from commbench.cli.fit import fit
    from commbench.cli.model import model
    from commbench.cli.report import report
    from commbench.cli.run import run
    from commbench.cli.slurm import slurm
    from commbench.cli.sweep import sweep
    from commbench.cli.trace import trace
    from commbench.cli.train import ddp, fsdp, zero

    main.add_command(sweep)
    main.add_command(run)
    main.add_command(env)
    main.add_command(trace)
    main.add_command(model)
    main.add_command(fit)
    main.add_command(ddp)
    main.add_command(fsdp)
    main.add_command(zero)
    main.add_command(compare_command)
    main.add_command(report)
    main.add_command(slurm)


_register()
