"""The `commbench` command group; user errors become one line on stderr and exit code 2, never a traceback.

Importing the CLI imports no command (each when it is looked up; then it loads what it uses when it runs), so
`commbench --help`, Tab and the analytic `commbench model` commands start at once.
"""

import difflib
import importlib
import sys
from collections import UserDict
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from commbench import __version__, srun_ranks
from commbench.cli.shared import warnings_held
from commbench.errors import CommbenchError, ExitCode
from commbench.running.lifetime import command_running, interrupted, stop_of, the_program

# Each command: where it is (the attribute after the colon in commbench.cli.<module>; "bench": the bench kind's), and
# the start of its summary, which listing the commands reads instead of importing them: as much as Click's widest
# listing shows, and a word more (tests/test_startup.py checks it against the command's own).
_COMMANDS = {
    "sweep": ("bench", "Measure collectives at each message size with statistics and a correctness"),
    "ddp": ("bench", "DDP step time, exposed communication and memory over bucket sizes"),
    "fsdp": ("bench", "FSDP step time, exposed communication and memory over resharding,"),
    "zero": ("bench", "Sharding strategies side by side: DDP, ZeRO-1/2/3 and HSDP, with model"),
    "hunt": ("bench", "Name the slow node or the bad link of an allocation: intra-node all_reduce"),
    "p2p": ("bench", "Point-to-point bandwidth and latency between every ordered pair of"),
    "replay": ("bench", "Replay the collectives of a traced training step on this job: the"),
    "perf": ("perf:perf", "Run nccl-tests' benchmark of COLLECTIVE with nccl-tests' flags, method"),
    "run": ("run:run", "Run the benches of SUITE (a .toml file, or a shipped suite's name:"),
    "suites": ("suites:suites", "List the shipped suites (`commbench run NAME` runs one); `commbench"),
    "selftest": ("selftest:selftest", "Exercise every path this machine supports, each as a real commbench"),
    "env": ("env:env", "Show torch, backends, devices, GPUs (NVML), the default a bare `commbench"),
    "expect": ("expect:expect", "Expected busbw per collective: what a healthy machine reaches with"),
    "trace": ("trace:trace", "Analyse profiler traces (Kineto JSON, plain or gzipped)."),
    "model": ("model:model", "Analytic models: model-state memory and communication per step."),
    "fit": ("fit:fit", "Fit t = α + S/bandwidth per (collective, impl, backend, world size,"),
    "compare": ("compare:compare_command", "Join two runs on their configuration keys and flag rows that got worse"),
    "report": ("report:report", "Draw the plots whose data exist in the runs, and write a self-contained"),
    "import": ("import_results:import_group", "Read nccl-tests, PARAM or NCCL Inspector results into a commbench"),
    "slurm": ("slurm:slurm", "Run suites as Slurm batch jobs: srun starts one torchrun per node,"),
    "k8s": ("k8s:k8s", "Write a Kubernetes manifest that runs SUITE (a .toml file, or a shipped"),
    "tune": ("tune:tune", "Compare the environment combinations the runs measured (rows keyed"),
    "export": ("export:export_group", "Write runs in another tool's format."),
}


class _StandIn(click.Command):
    """A command not imported yet, as listing the commands reads it: the start of its summary."""


class _Commands(UserDict[str, click.Command]):
    """Click's Group.commands: each a stand-in until it is first looked up, which imports it."""

    def __getitem__(self, name: str) -> click.Command:
        if isinstance(self.data[name], _StandIn):
            module, _, attribute = _COMMANDS[name][0].partition(":")
            if module == "bench":
                from commbench.benches import kind_for_command
                from commbench.cli.bench import bench_command

                self.data[name] = bench_command(kind_for_command(name))
            else:
                self.data[name] = getattr(importlib.import_module(f"commbench.cli.{module}"), attribute)
        return self.data[name]


class _OneLineErrors(click.Group):
    commands: _Commands

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """What listing the commands reads (`commbench --help`, Tab): a stand-in for one not imported yet."""
        return self.commands.data.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """The command to run (or to give its own --help or completion): imported."""
        name, command, rest = super().resolve_command(ctx, args)
        return name, command if name is None else self.commands[name], rest

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


@click.group(name="commbench", cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]},
             commands=_Commands({name: _StandIn(name, help=summary) for name, (_, summary) in _COMMANDS.items()}))
@click.version_option(__version__, prog_name="commbench")
def main() -> None:
    """Collective-communication benchmarks for PyTorch distributed: measure, verify, store."""


def program() -> None:
    """The `commbench` script and `python -m commbench`: the process ends with the command, so it takes the stop
    signals for the whole of its life (stopping.as_the_program()); a rank run in place leaves them to its launcher."""
    srun_ranks.adopt()  # an srun step's task becomes its rank (RANK, WORLD_SIZE, ...) before anything reads them
    with the_program():
        main()
