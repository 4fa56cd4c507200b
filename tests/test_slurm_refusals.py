"""`commbench slurm submit` refuses, in process and before anything exists, every --sbatch-arg spelling of an option
commbench sets itself and every hostile value of every string field; hostile values that are valid reach the job
literally. Each case runs twice: with --dry-run and as a real submit (sbatch replaced by a recorder, so an accepted
value would be seen, not submitted).

The tables are generated: a new field is one line in FIELDS, a new hostile value one line in hostile_values()."""

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from commbench.slurm import jobs
from tests.refusals import assert_refused, invoke

SUITE = "cpu-ci"
VALID = ["--nodes", "1", "--gpus-per-node", "0"]
MODES = pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submit"])


@pytest.fixture
def submitted(monkeypatch):
    """What reached sbatch: the scripts. Slurm's client is stubbed, so an accepted case is recorded, not sent."""
    scripts = []
    monkeypatch.setattr(jobs, "require_client", lambda: None)
    monkeypatch.setattr(jobs, "submit", lambda script, *, cwd: scripts.append(script) or "4242")
    monkeypatch.setattr(jobs, "release", lambda job_id: None)
    return scripts


def _submit(tmp_path: Path, args: list[str], *, dry_run: bool, suite: str = SUITE, out: str | None = None):
    """Runs in an empty folder, so anything created anywhere under it is a leftover."""
    out_args = [] if out is None and "--out" in args else ["--out", out or str(tmp_path / "results")]
    return invoke(["slurm", "submit", suite, *VALID, *args, *out_args, *(["--dry-run"] if dry_run else [])],
                  cwd=tmp_path)


def _assert_refused_cleanly(result, tmp_path: Path, submitted: list, fragment: str | None = None) -> str:
    line = assert_refused(result, fragment=fragment, left_empty=(tmp_path,))
    assert not submitted, f"submitted: {submitted}"
    return line


# --- the harness can fail: a valid submit goes through it ----------------------------------------------------------

def test_a_valid_submit_reaches_sbatch_through_the_stub(tmp_path, submitted):
    result = _submit(tmp_path, ["--sbatch-arg=--mem=0", "--run-id", "r1"], dry_run=False)
    assert result.exit_code == 0, result.stderr
    assert submitted == [tmp_path / "results" / "r1" / "job.sbatch"]
    assert "#SBATCH --mem=0" in submitted[0].read_text()


# --- --sbatch-arg: every spelling of an option commbench sets -------------------------------------------------------

def _options_in_script() -> set[str]:
    """The long options commbench writes into #SBATCH lines when every option of its own is used: read from a
    rendered script, so a directive added there is covered here without a new line."""
    result = invoke(["slurm", "submit", SUITE, "--nodes", "1", "--gpus-per-node", "8", "--device", "cpu",
                     "--backend", "gloo", "--nproc-per-node", "2", "--partition", "p", "--account", "a", "--qos",
                     "q", "--constraint", "c", "--time", "10", "--cpus-per-task", "2", "--exclusive", "--dry-run"])
    assert result.exit_code == 0, result.stderr
    return set(re.findall(r"^#SBATCH --([a-z-]+)", result.stdout, re.M))


OWN_OPTIONS = sorted(_options_in_script() | {"requeue"})  # --no-requeue is written; --requeue would undo it
OTHER_SPELLINGS_OF_OWN = ["ntasks", "gpus", "error", "chdir"]
"""Options commbench does not write but that change what it writes: the task count, the GPU count, where the log
and the job's working directory are."""
BREAK_THE_RUN = ["array", "wait", "test-only", "export", "export-file", "wrap"]
"""Options that would run the suite twice into one folder, hang sbatch on the held job, submit nothing, strip the
environment the job needs, or replace commbench's script."""
PROTECTED = sorted({*OWN_OPTIONS, *OTHER_SPELLINGS_OF_OWN, *BREAK_THE_RUN})
SHORT = {"N": "nodes", "n": "ntasks", "o": "output", "e": "error", "J": "job-name", "D": "chdir", "p": "partition",
         "A": "account", "t": "time", "q": "qos", "C": "constraint", "c": "cpus-per-task", "G": "gpus", "a": "array",
         "W": "wait"}
"""sbatch 22.05 short options (sbatch --help) that spell a protected long option."""
FLAGS_BEFORE = ["v", "O", "Q", "vO"]
"""No-value short flags that getopt reads before the next letter of a cluster: -vN3 is -v -N 3."""


def long_spellings(name: str) -> list[list[str]]:
    """Each entry: the --sbatch-arg values of one attempt (several for a value in its own --sbatch-arg)."""
    whitespace = ["\n", "\r\n", " ", "\t", "\r", "\x0b", "\x0c"]
    spellings = [[f"--{name}"], [f"--{name}=3"], [f"--{name}=x"], [f"--{name}", "3"], [f"--{name} 3"],
                 [f"--{name.upper()}=3"], [f"--{name.capitalize()}"], [f" --{name}"], [f"-{name}=3"]]
    spellings += [[f"--{name}{tail}"] for tail in whitespace] + [[f"--{name}=3{tail}"] for tail in whitespace]
    # sbatch reads any unambiguous abbreviation as the option (and refuses an ambiguous one)
    spellings += [[f"--{name[:length]}=3"] for length in range(1, len(name))]
    return spellings


def short_spellings(letter: str) -> list[list[str]]:
    spellings = [[f"-{letter}3"], [f"-{letter}"], [f"-{letter}", "3"], [f"-{letter} 3"], [f"-{letter}=3"],
                 [f"-{letter}3\n"], [f"-{letter}\n"], [f"-{letter}3 "]]
    spellings += [[f"-{flags}{letter}3"] for flags in FLAGS_BEFORE]
    return spellings


SBATCH_ARG_CASES = [pytest.param(values, id=repr(values)) for name in PROTECTED for values in long_spellings(name)]
SBATCH_ARG_CASES += [pytest.param(values, id=repr(values)) for letter in SHORT for values in short_spellings(letter)]


@MODES
@pytest.mark.parametrize("values", SBATCH_ARG_CASES)
def test_sbatch_arg_cannot_give_an_option_commbench_sets(tmp_path, submitted, values, dry_run):
    args = [item for value in values for item in ("--sbatch-arg", value)]
    _assert_refused_cleanly(_submit(tmp_path, args, dry_run=dry_run), tmp_path, submitted, fragment="--sbatch-arg")


@pytest.mark.parametrize("value", ["--mem=0", "--reservation=R", "--mem-per-cpu=1G", "--time-min=10",
                                   "--gres=gpu:1", "--comment=a,b", "--hint=nomultithread", "--nodelist=n[1-2]",
                                   "-wn1", "-H", "-Q", "-Ovxn3", "--signal=B:USR1@60", "--open-mode=append",
                                   "--exclude=n2", "--licenses=fs:1"])
def test_other_sbatch_options_still_reach_the_script(tmp_path, value):
    result = _submit(tmp_path, ["--sbatch-arg", value], dry_run=True)
    assert result.exit_code == 0, result.stderr
    assert f"\n#SBATCH {value}\n" in result.stdout


def test_the_options_read_from_the_script_are_those_commbench_writes():
    # the table above was read from a rendered script; guard against an empty read passing everything
    assert {"nodes", "job-name", "output", "ntasks-per-node", "no-requeue", "gpus-per-node", "partition",
            "time", "exclusive", "cpus-per-task"} <= set(OWN_OPTIONS)


# --- string fields × hostile values ---------------------------------------------------------------------------------

def hostile_values(base: str) -> list[tuple[str, str]]:
    """(class, value): every C0 control, DEL, C1 controls, escape sequences and Unicode line breaks, at the end (the
    `$` trap) and for the line breaks also at the start and inside; and the empty and blank value."""
    values = [(f"C0 {ord(char):#04x}", base + char) for char in map(chr, range(0x20))]
    values += [("DEL", base + "\x7f"), ("C1 NEL", base + "\x85"), ("C1 CSI", base + "\x9b"),
               ("ESC sequence", base + "\x1b[31m"), ("ESC sequence", "\x1b]0;title\x07" + base),
               ("Unicode line break", base + "\u2028"), ("Unicode line break", base + "\u2029")]
    for char in ("\n", "\r"):
        values += [(f"line break inside {char!r}", char + base), (f"line break inside {char!r}", base[:1] + char +
                                                                  base[1:])]
    values += [("empty", ""), ("blank", " "), ("blank", "\t")]
    return values


FIELDS = {
    # field: (valid base value, how the value is passed)
    "--job-name": ("job", lambda value: ["--job-name", value]),
    "--partition": ("debug", lambda value: ["--partition", value]),
    "--account": ("acct", lambda value: ["--account", value]),
    "--qos": ("normal", lambda value: ["--qos", value]),
    "--constraint": ("h100", lambda value: ["--constraint", value]),
    "--time": ("30", lambda value: ["--time", value]),
    "--python": (sys.executable, lambda value: ["--python", value]),
    "--env NAME=VALUE": ("NCCL_ALGO", lambda value: ["--env", f"{value}=Ring"]),
    "--env NAME": ("PATH", lambda value: ["--env", value]),  # its value here
    "--sbatch-arg": ("--mem=0", lambda value: ["--sbatch-arg", value]),
    "--run-id": ("r1", lambda value: ["--run-id", value]),
    "--out": ("results", lambda value: ["--out", value]),
    "--container-image": ("nvcr.io#nvidia/pytorch:26.07-py3", lambda value: ["--container-image", value]),
    "--container-mounts": ("/data:/data:ro", lambda value: ["--container-image", "img:1", "--container-mounts", value]),
    "SUITE": (SUITE, None),
}
FIELD_CASES = [pytest.param(field, value, id=f"{field} {kind} {value!r}")
               for field, (base, _) in FIELDS.items() for kind, value in hostile_values(base)]


@MODES
@pytest.mark.parametrize("field, value", FIELD_CASES)
def test_hostile_values_are_refused_in_every_field(tmp_path, submitted, field, value, dry_run):
    base, pass_value = FIELDS[field]
    if pass_value is None:
        result = _submit(tmp_path, [], dry_run=dry_run, suite=value)
    else:
        result = _submit(tmp_path, pass_value(value), dry_run=dry_run)
    line = _assert_refused_cleanly(result, tmp_path, submitted)
    assert field.split()[0] in line, line  # the message names the field...
    assert repr(value)[1:-1] in line or not value.strip(), line  # ...and shows the value, control characters visible


def test_the_field_table_covers_every_string_option_of_submit():
    import click

    from commbench.cli.slurm import submit

    strings = {flag for param in submit.params if isinstance(param, click.Option) and param.type is click.STRING
               for flag in param.opts}
    assert strings == {field.split()[0] for field in FIELDS} - {"SUITE"}


def test_base_values_of_the_table_are_accepted(tmp_path, submitted):
    """Each hostile case differs from an accepted one by the hostile part only, so the refusal is the value's."""
    for field, (base, pass_value) in FIELDS.items():
        args = [] if pass_value is None else pass_value(base)
        folder = tmp_path / re.sub(r"\W", "_", field)
        folder.mkdir()
        result = _submit(folder, args, dry_run=True)
        assert result.exit_code == 0, (field, result.stderr)


# --- numbers --------------------------------------------------------------------------------------------------------

NUMBER_CASES = [
    *[(option, value) for option in ("--wait-timeout", "--poll") for value in ("nan", "inf", "-inf", "0", "-1", "x",
                                                                                 "")],
    *[("--nodes", value) for value in ("0", "-1", "1.5", "")],
    *[("--gpus-per-node", value) for value in ("-1", "x")],
    *[("--nproc-per-node", value) for value in ("0", "-2")],
    *[("--cpus-per-task", value) for value in ("0", "-1")],
    *[("--rdzv-port", value) for value in ("0", "-1", "80", "65536", "1e4")],
]


@MODES
@pytest.mark.parametrize("option, value", NUMBER_CASES)
def test_meaningless_numbers_are_refused(tmp_path, submitted, option, value, dry_run):
    options = {"--nodes": "1", "--gpus-per-node": "0", option: value}
    args = [item for pair in options.items() for item in pair]
    result = invoke(["slurm", "submit", SUITE, *args, "--out", str(tmp_path / "results"),
                     *(["--dry-run"] if dry_run else [])], cwd=tmp_path)
    line = _assert_refused_cleanly(result, tmp_path, submitted)
    assert option in line, line


def test_gpus_per_node_0_is_a_cpu_node(tmp_path):
    result = _submit(tmp_path, [], dry_run=True)
    assert result.exit_code == 0 and "--gpus-per-node" not in result.stdout


# --- --dry-run refuses what a submit refuses ------------------------------------------------------------------------

def test_dry_run_refuses_a_run_id_that_is_taken(tmp_path, submitted):
    (tmp_path / "results" / "r1").mkdir(parents=True)
    for dry_run in (True, False):
        result = _submit(tmp_path, ["--run-id", "r1"], dry_run=dry_run)
        assert_refused(result, fragment="already exists; choose another --run-id")
    assert not submitted and [path.name for path in tmp_path.rglob("*")] == ["results", "r1"]


# --- hostile but valid: quoted, and reaching the job literally ------------------------------------------------------

VALID_HOSTILE = ["a b", "'single'", '"double"', "$(touch $CANARY.1)", "`touch $CANARY.2`", "; touch $CANARY.3",
                 "back\\slash", "ünïcødé ☃", "*", "~", "-x", "$HOME", "a'\"b"]
ENV_ONLY = ["line\nbreak", "tab\there", "cr\rhere", "esc\x1b[31m", "del\x7f"]
"""Valid in an environment value only: it is one quoted shell word, and a value may hold these."""


def _run_script(script_text: str, tmp_path: Path, env_name: str) -> tuple[list[str], str]:
    """Runs the rendered script under bash with srun and scontrol replaced: srun's argv (NUL-separated, so any
    character survives) and the job's value of env_name."""
    script = tmp_path / "job.sbatch"
    script.write_bytes(script_text.encode())
    argv_file, env_file = tmp_path / "argv", tmp_path / "env"
    stubs = (f'srun() {{ printf "%s\\0" "$@" > "$ARGV_FILE"; printf "%s" "${{{env_name}-}}" > "$ENV_FILE"; }}\n'
             'scontrol() { case "$1" in hostnames) echo n1;; show) echo "NodeName=n1 NodeAddr=127.0.0.1 x";; '
             'esac; }\n')
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n1", "ARGV_FILE": str(argv_file),
           "ENV_FILE": str(env_file), "CANARY": str(tmp_path / "canary"), "SCRIPT": str(script)}
    completed = subprocess.run(["bash", "-c", stubs + 'source "$SCRIPT"'], env=env, capture_output=True, timeout=30)
    assert completed.returncode == 0, completed.stderr
    return argv_file.read_bytes().decode().split("\0")[:-1], env_file.read_bytes().decode()


@pytest.mark.parametrize("value", VALID_HOSTILE + ENV_ONLY, ids=repr)
def test_hostile_but_valid_values_reach_the_job_literally(tmp_path, value):
    accepted_everywhere = value not in ENV_ONLY
    out = tmp_path / "o" / value if accepted_everywhere else tmp_path / "o"
    python = value if accepted_everywhere else sys.executable
    result = _submit(tmp_path, ["--python", python, "--env", f"COMMBENCH_PROBE={value}", "--run-id", "r1"],
                     dry_run=True, out=str(out))
    assert result.exit_code == 0, result.stderr
    probe = tmp_path / "probe"
    probe.mkdir()
    argv, env_value = _run_script(result.stdout, probe, "COMMBENCH_PROBE")
    assert env_value == value
    # srun --nodes --ntasks-per-node --kill-on-bad-exit bash -c NODE_STEP commbench-node PYTHON --nnodes ...: the
    # node's step runs PYTHON -m torch.distributed.run --local-addr=... (tests/test_slurm_placement.py runs it)
    assert argv[3:5] == ["bash", "-c"] and argv[6] == "commbench-node"
    assert argv[7] == python
    assert argv[argv.index("--into") + 1] == str((out / "r1").resolve())
    assert not [path for path in probe.iterdir() if path.name.startswith("canary")]


@pytest.mark.parametrize("value", ["a\0b"], ids=repr)
def test_an_env_value_with_nul_is_refused(tmp_path, submitted, value):
    for dry_run in (True, False):
        result = _submit(tmp_path, ["--env", f"COMMBENCH_PROBE={value}"], dry_run=dry_run)
        _assert_refused_cleanly(result, tmp_path, submitted, fragment="NUL")


def test_hostile_table_holds_every_c0_control():
    controls = {value[-1] for kind, value in hostile_values("x") if kind.startswith("C0")}
    assert controls == {chr(code) for code in range(0x20)}
    assert all(unicodedata.category(char) == "Cc" for char in controls)
