"""Render the sbatch template for one suite run: #SBATCH directives, exported environment, the srun + torchrun line.

The template is commbench/data/slurm/commbench.sbatch (package data, read through commbench.shipped).

Two kinds of user input reach the script, and each is made safe its own way:
- values in the shell body (paths, environment values, options) are quoted with shlex.quote, so bash reads each as
  one literal word: `$(...)`, backticks, `;` and quotes inside them are never executed;
- values in #SBATCH lines are read by sbatch, not by a shell, and sbatch has no quoting there: they must consist of
  characters that mean nothing to it (no spaces, quotes, `#`, backslashes), and anything else is refused with exit 2.
"""

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from commbench import shipped
from commbench.batch.fields import check_text_field, refuse_control_characters
from commbench.errors import CommbenchError
from commbench.machine import CPUS_PER_LOCAL_RANK
from commbench.slurm.container import Container

LOG_PATTERN = "slurm-%j.out"
"""Relative: the job runs in the run folder (sbatch is called there), so user paths never enter a directive."""

# Every pattern below is used with fullmatch: `$` would also match before a trailing newline ("--requeue\n").
_DIRECTIVE_CHARS = r"A-Za-z0-9_.,:+=@%/&|*!\[\]-"
_DIRECTIVE_VALUE = re.compile(f"[{_DIRECTIVE_CHARS}]+")
_LONG_SBATCH_ARG = re.compile(f"--([a-z][a-z0-9-]*)(=[{_DIRECTIVE_CHARS}]+)?")
_SHORT_SBATCH_ARG = re.compile(f"-([A-Za-z][{_DIRECTIVE_CHARS}]*)")
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")
_OWN_OPTION = "use the commbench option of that name"
_SET_BY_COMMBENCH = {
    "nodes": "use --nodes",
    **dict.fromkeys(("ntasks", "ntasks-per-node"), "one task per node, which runs torchrun"),
    **dict.fromkeys(("gpus-per-node", "gpus"), "use --gpus-per-node"),
    "job-name": "use --job-name",
    **dict.fromkeys(("output", "error", "chdir"), "the log and the job's working directory are the run folder"),
    **dict.fromkeys(("partition", "account", "time", "qos", "constraint", "exclusive", "cpus-per-task"), _OWN_OPTION),
    **dict.fromkeys(("requeue", "no-requeue"), "a run folder is filled once, so the job is never requeued"),
    "array": "every array task would run the suite again into the same run folder",
    **dict.fromkeys(("export", "export-file"), "use --env: the job needs the environment it is submitted from"),
    "wait": "commbench submits the job held, so sbatch would wait forever; use commbench's --wait",
    "test-only": "nothing would be submitted; use --dry-run",
    "wrap": "the job runs commbench's own batch script",
}
"""Long sbatch options an --sbatch-arg may not give, with why. sbatch also reads any unambiguous abbreviation
(`--outp=x` is --output=x), so every prefix of these is refused too."""
_SBATCH_SHORT = {
    **dict.fromkeys("aAbcCdDeFGiJLmMnNopqStwx", True), **dict.fromkeys("hHkOQsvVW", False),
}
"""sbatch 22.05's short options (sbatch --help), letter: whether it takes a value (attached: -N3)."""
_SBATCH_SHORT_LONG = {"a": "array", "A": "account", "c": "cpus-per-task", "C": "constraint", "D": "chdir",
                      "e": "error", "G": "gpus", "J": "job-name", "n": "ntasks", "N": "nodes", "o": "output",
                      "p": "partition", "q": "qos", "t": "time", "W": "wait"}
"""The short options that spell an option in _SET_BY_COMMBENCH."""
_USER_CPU_OPTIONS = ("cpus-per-gpu", "mincpus")
"""sbatch options of an --sbatch-arg that say how many CPUs the job gets: given, commbench asks for none itself."""
DEFAULT_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")
"""Exported into the job from the submitting shell by default: the knobs that change what a collective does."""


@dataclass(frozen=True, kw_only=True)
class SbatchOptions:
    """The options of `commbench slurm submit` that reach sbatch as they are."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: str | None = None
    cpus_per_task: int | None = None
    exclusive: bool = False
    sbatch_args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class JobRequest(SbatchOptions):
    nodes: int
    gpus_per_node: int
    nproc_per_node: int
    job_name: str
    env: dict[str, str] = field(default_factory=dict)
    rdzv_port: int | None = None
    python: str = "python3"
    run_options: tuple[str, ...] = ()
    """Extra `commbench run` options (--backend/--device/--nproc overrides)."""
    container: Container | None = None
    """The image the step runs in (pyxis), or None: the nodes' own Python."""


def validate(request: JobRequest) -> None:
    """Refuse what cannot be written safely or cannot run, before anything is created or submitted."""
    _validate_counts(request)
    for option, value in (*_directive_values(request), ("--time", request.time),
                          *(("--sbatch-arg", arg) for arg in request.sbatch_args)):
        if value is not None:
            refuse_control_characters(option, value)
    if request.time is not None and not _TIME.fullmatch(request.time):
        raise CommbenchError(f"--time {request.time!r} is not a Slurm time; use MINUTES, HH:MM:SS or D-HH:MM:SS")
    for option, value in _directive_values(request):
        if value is not None and not _DIRECTIVE_VALUE.fullmatch(value):
            raise CommbenchError(f"{option} {value!r} cannot go into an #SBATCH line (sbatch does not unquote them); "
                                 "use letters, digits and _.,:+=@%/&|*![]-")
    for arg in request.sbatch_args:
        check_sbatch_arg(arg)
    for name, value in request.env.items():
        check_env_name(name)
        if "\0" in value:  # the only character a quoted shell word (and an environment) cannot hold
            raise CommbenchError(f"--env {name}={value!r} holds a NUL character, which no environment variable can "
                                 "hold; remove it")
    check_text_field("--python", request.python)


def _directive_values(request: JobRequest) -> tuple[tuple[str, str | None], ...]:
    """The free-text values that go into #SBATCH lines as they are, by option."""
    return (("--job-name", request.job_name), ("--partition", request.partition), ("--account", request.account),
            ("--qos", request.qos), ("--constraint", request.constraint))


def _validate_counts(request: JobRequest) -> None:
    if request.nodes < 1:
        raise CommbenchError(f"--nodes {request.nodes} is not a node count; use 1 or more")
    if request.gpus_per_node < 0:
        raise CommbenchError(f"--gpus-per-node {request.gpus_per_node} is negative; use 0 for CPU nodes")
    if request.nproc_per_node < 1:
        raise CommbenchError(f"--nproc-per-node {request.nproc_per_node} is not a rank count; use 1 or more")
    if request.cpus_per_task is not None and request.cpus_per_task < 1:
        raise CommbenchError(f"--cpus-per-task {request.cpus_per_task} must be 1 or more")
    if request.rdzv_port is not None and not 1024 <= request.rdzv_port <= 65535:
        raise CommbenchError(f"--rdzv-port {request.rdzv_port} is not a usable port; use 1024-65535")


def check_env_name(name: str) -> None:
    refuse_control_characters("--env", name)
    if not _ENV_NAME.fullmatch(name):
        raise CommbenchError(f"--env {name!r} is not an environment variable name; use letters, digits and _ "
                             "(not starting with a digit)")


def check_sbatch_arg(arg: str) -> None:
    """One sbatch option, read by sbatch the way it reads an #SBATCH line, that changes nothing commbench sets."""
    long_match, short_match = _LONG_SBATCH_ARG.fullmatch(arg), _SHORT_SBATCH_ARG.fullmatch(arg)
    if long_match:
        _check_long_sbatch_option(arg, long_match.group(1))
    elif short_match:
        _check_short_sbatch_options(arg, short_match.group(1))
    else:
        raise CommbenchError(f"--sbatch-arg {arg!r} is not one sbatch option like --mem=0 or --reservation=R "
                             "(lower-case name, value after '=', no spaces, quotes or control characters: it goes "
                             "into an #SBATCH line)")


def _check_long_sbatch_option(arg: str, name: str) -> None:
    # sbatch takes an unambiguous abbreviation for the option itself and refuses an ambiguous one: either way a
    # prefix of an option commbench sets is refused here, before any folder exists
    spelled = [option for option in _SET_BY_COMMBENCH if option.startswith(name)]
    if name in _SET_BY_COMMBENCH:
        raise CommbenchError(f"--sbatch-arg {arg!r}: commbench sets --{name} itself ({_SET_BY_COMMBENCH[name]})")
    if spelled:
        raise CommbenchError(f"--sbatch-arg {arg!r}: sbatch reads --{name} as --{spelled[0]}"
                             f"{' or refuses it as ambiguous' if len(spelled) > 1 else ''}, which commbench sets "
                             f"itself ({_SET_BY_COMMBENCH[spelled[0]]})")


def _check_short_sbatch_options(arg: str, cluster: str) -> None:
    word = cluster.split("=", 1)[0]
    if len(word) > 1 and word in _SET_BY_COMMBENCH:  # -wait is -w ait, not --wait: say what it was taken for
        raise CommbenchError(f"--sbatch-arg {arg!r}: sbatch reads -{word} as -{word[0]} {word[1:]!r}, not as --{word}, "
                             f"which commbench sets itself ({_SET_BY_COMMBENCH[word]})")
    # like getopt: -vN3 is -v -N 3; the first letter that takes a value takes the rest of the word
    for position, letter in enumerate(cluster):
        if letter not in _SBATCH_SHORT:
            raise CommbenchError(f"--sbatch-arg {arg!r}: -{letter} is not an sbatch option; use its long spelling")
        if letter in _SBATCH_SHORT_LONG:
            option = _SBATCH_SHORT_LONG[letter]
            raise CommbenchError(f"--sbatch-arg {arg!r}: -{letter} is --{option}, which commbench sets itself "
                                 f"({_SET_BY_COMMBENCH[option]})")
        if _SBATCH_SHORT[letter]:
            if position == len(cluster) - 1:
                raise CommbenchError(f"--sbatch-arg {arg!r}: -{letter} needs its value in the same --sbatch-arg, "
                                     f"e.g. -{letter}VALUE")
            return


def job_env(passed: tuple[str, ...], environ: dict[str, str]) -> dict[str, str]:
    """--env NAME (its value here) or NAME=VALUE, on top of the NCCL_/TORCH_NCCL_/GLOO_ variables set here."""
    env = {name: value for name, value in sorted(environ.items()) if name.startswith(DEFAULT_ENV_PREFIXES)}
    for item in passed:
        name, sep, value = item.partition("=")
        check_env_name(name)
        if not sep:
            if name not in environ:
                raise CommbenchError(f"--env {name}: not set in this shell; write --env {name}=VALUE")
            value = environ[name]
        env[name] = value
    return env


def directives(request: JobRequest) -> list[str]:
    """The #SBATCH lines: one srun task per node, which starts torchrun, which starts the node's ranks; then a
    comment line that says what CPUs were asked for and why."""
    # --no-requeue: a requeued job would run again into the same run folder, which is filled once
    lines = [f"--job-name={request.job_name}", f"--nodes={request.nodes}", "--ntasks-per-node=1",
             f"--output={LOG_PATTERN}", "--no-requeue"]
    if request.gpus_per_node:
        lines.append(f"--gpus-per-node={request.gpus_per_node}")
    cpus, why = cpus_per_task(request)
    optional = {"--cpus-per-task": cpus, "--time": request.time, "--partition": request.partition,
                "--account": request.account, "--qos": request.qos, "--constraint": request.constraint}
    lines += [f"{option}={value}" for option, value in optional.items() if value is not None]
    if request.exclusive:
        lines.append("--exclusive")
    lines += list(request.sbatch_args)
    return [f"#SBATCH {line}" for line in lines] + [f"# CPUs: {why}"]


def cpus_per_task(request: JobRequest) -> tuple[int | None, str]:
    """The --cpus-per-task of the one task per node (None: not asked for), and why, for the script's comment.

    The user's choice wins: --cpus-per-task, --exclusive, or an --sbatch-arg naming the CPUs (--cpus-per-gpu,
    --mincpus). Otherwise a GPU job asks for CPUS_PER_LOCAL_RANK per rank plus one for torchrun's agent: without
    it, a partition that is not exclusive and has no DefCpuPerGPU grants one CPU per task, and torchrun, every rank,
    their watchdog threads and NCCL's proxy threads share one core. Not --exclusive by default: a whole node costs
    more, waits longer and some partitions refuse it. A CPU job asks for nothing (its ranks are the load; choose
    with --cpus-per-task), as before."""
    if request.cpus_per_task is not None:
        return request.cpus_per_task, f"--cpus-per-task={request.cpus_per_task}, as asked"
    if request.exclusive:
        return None, "--exclusive, as asked: every CPU of the nodes"
    named = next((arg for arg in request.sbatch_args if _names_cpus(arg)), None)
    if named is not None:
        return None, f"{named}, as asked"
    if request.gpus_per_node:
        wanted = CPUS_PER_LOCAL_RANK * request.nproc_per_node + 1
        return wanted, (f"--cpus-per-task={wanted}, {CPUS_PER_LOCAL_RANK} per rank + 1 for torchrun (without it a "
                        "partition that is not exclusive grants 1 CPU per task); choose with --cpus-per-task or "
                        "--exclusive")
    return None, "none asked for (CPU ranks; Slurm's default); choose with --cpus-per-task or --exclusive"


def _names_cpus(arg: str) -> bool:
    """Whether an --sbatch-arg is one of _USER_CPU_OPTIONS, in any spelling sbatch reads (an abbreviation too)."""
    name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
    return bool(name) and any(option.startswith(name) for option in _USER_CPU_OPTIONS)


def render(request: JobRequest, *, suite_file: Path, run_dir: Path, template: Path | None = None) -> str:
    """template: a template file to use instead of the shipped one (tests)."""
    validate(request)
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in request.env.items())
    # Without a chosen port, one derived from the job id keeps two jobs that share a first node apart.
    port = str(request.rdzv_port) if request.rdzv_port else "$((20000 + SLURM_JOB_ID % 20000))"
    values = {
        "@SBATCH_DIRECTIVES@": "\n".join(directives(request)),
        "@ENV_EXPORTS@": exports,
        "@RDZV_PORT@": port,
        "@NODES@": str(request.nodes),
        "@NPROC_PER_NODE@": str(request.nproc_per_node),
        "@PYTHON@": shlex.quote(request.python),
        "@SUITE@": shlex.quote(str(suite_file)),
        "@RUN_DIR@": shlex.quote(str(run_dir)),
        "@RUN_OPTIONS@": "".join(f" {shlex.quote(option)}" for option in request.run_options),
        "@SRUN_CONTAINER@": "".join(f"{shlex.quote(option)} " for option in
                                    (request.container.srun_options(run_dir) if request.container else ())),
    }
    text = template.read_text(encoding="utf-8") if template else shipped.sbatch_template()
    unknown = set(_PLACEHOLDER.findall(text)) - set(values)
    if unknown:
        where = template or shipped.sbatch_template_name()
        raise CommbenchError(f"{where} has placeholders commbench does not know: {', '.join(sorted(unknown))}")
    # one pass, so a value that happens to contain "@NODES@" is not substituted again
    return _PLACEHOLDER.sub(lambda match: values[match.group(0)], text)
