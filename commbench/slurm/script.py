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
from commbench.errors import CommbenchError

LOG_PATTERN = "slurm-%j.out"
"""Relative: the job runs in the run folder (sbatch is called there), so user paths never enter a directive."""

_DIRECTIVE_VALUE = re.compile(r"^[A-Za-z0-9_.,:+=@%/&|*!\[\]-]+$")
_SBATCH_ARG = re.compile(r"^--?[A-Za-z][A-Za-z0-9-]*(=[A-Za-z0-9_.,:+=@%/&|*!\[\]-]+)?$")
_TIME = re.compile(r"^(\d+-)?\d+(:\d{1,2}){0,2}$|^(UNLIMITED|INFINITE)$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"@[A-Z_]+@")
_SET_BY_COMMBENCH = {
    **dict.fromkeys(("-N", "--nodes"), "use --nodes"),
    **dict.fromkeys(("-n", "--ntasks", "--ntasks-per-node"), "one task per node, which runs torchrun"),
    **dict.fromkeys(("--gpus-per-node", "-G", "--gpus"), "use --gpus-per-node"),
    **dict.fromkeys(("-J", "--job-name"), "use --job-name"),
    **dict.fromkeys(("-o", "--output", "-e", "--error", "-D", "--chdir"),
                    "the log and the job's working directory are the run folder"),
    **dict.fromkeys(("-p", "--partition", "-A", "--account", "-t", "--time", "-q", "--qos", "-C", "--constraint",
                     "--exclusive", "-c", "--cpus-per-task"), "use the option of that name"),
    **dict.fromkeys(("--requeue", "--no-requeue"), "a run folder is filled once, so the job is never requeued"),
}
DEFAULT_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")
"""Exported into the job from the submitting shell by default: the knobs that change what a collective does."""


@dataclass(frozen=True)
class JobRequest:
    nodes: int
    gpus_per_node: int
    nproc_per_node: int
    job_name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    time: str | None = None
    cpus_per_task: int | None = None
    exclusive: bool = False
    sbatch_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    rdzv_port: int | None = None
    python: str = "python3"
    run_options: tuple[str, ...] = ()
    """Extra `commbench run` options (--backend/--device/--nproc overrides)."""


def validate(request: JobRequest) -> None:
    """Refuse what cannot be written safely or cannot run, before anything is created or submitted."""
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
    if request.time is not None and not _TIME.match(request.time):
        raise CommbenchError(f"--time {request.time!r} is not a Slurm time; use MINUTES, HH:MM:SS or D-HH:MM:SS")
    for option, value in (("--job-name", request.job_name), ("--partition", request.partition),
                          ("--account", request.account), ("--qos", request.qos),
                          ("--constraint", request.constraint)):
        if value is not None and not _DIRECTIVE_VALUE.match(value):
            raise CommbenchError(f"{option} {value!r} cannot go into an #SBATCH line (sbatch does not unquote them); "
                                 "use letters, digits and _.,:+=@%/&|*![]-")
    for arg in request.sbatch_args:
        if not _SBATCH_ARG.match(arg):
            raise CommbenchError(f"--sbatch-arg {arg!r} is not one sbatch option like --mem=0 or --reservation=R "
                                 "(no spaces or quotes: it goes into an #SBATCH line)")
        name = arg.split("=", 1)[0]
        if name in _SET_BY_COMMBENCH:
            raise CommbenchError(f"--sbatch-arg {arg!r}: commbench sets {name} itself ({_SET_BY_COMMBENCH[name]})")
    for name in request.env:
        if not _ENV_NAME.match(name):
            raise CommbenchError(f"--env {name!r} is not an environment variable name; use letters, digits and _")


def job_env(passed: tuple[str, ...], environ: dict[str, str]) -> dict[str, str]:
    """--env NAME (its value here) or NAME=VALUE, on top of the NCCL_/TORCH_NCCL_/GLOO_ variables set here."""
    env = {name: value for name, value in sorted(environ.items()) if name.startswith(DEFAULT_ENV_PREFIXES)}
    for item in passed:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in environ:
                raise CommbenchError(f"--env {name}: not set in this shell; write --env {name}=VALUE")
            value = environ[name]
        env[name] = value
    return env


def directives(request: JobRequest) -> list[str]:
    """The #SBATCH lines: one srun task per node, which starts torchrun, which starts the node's ranks."""
    # --no-requeue: a requeued job would run again into the same run folder, which is filled once
    lines = [f"--job-name={request.job_name}", f"--nodes={request.nodes}", "--ntasks-per-node=1",
             f"--output={LOG_PATTERN}", "--no-requeue"]
    if request.gpus_per_node:
        lines.append(f"--gpus-per-node={request.gpus_per_node}")
    optional = {"--cpus-per-task": request.cpus_per_task, "--time": request.time, "--partition": request.partition,
                "--account": request.account, "--qos": request.qos, "--constraint": request.constraint}
    lines += [f"{option}={value}" for option, value in optional.items() if value is not None]
    if request.exclusive:
        lines.append("--exclusive")
    lines += list(request.sbatch_args)
    return [f"#SBATCH {line}" for line in lines]


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
    }
    text = template.read_text(encoding="utf-8") if template else shipped.sbatch_template()
    unknown = set(_PLACEHOLDER.findall(text)) - set(values)
    if unknown:
        where = template or shipped.sbatch_template_name()
        raise CommbenchError(f"{where} has placeholders commbench does not know: {', '.join(sorted(unknown))}")
    # one pass, so a value that happens to contain "@NODES@" is not substituted again
    return _PLACEHOLDER.sub(lambda match: values[match.group(0)], text)
