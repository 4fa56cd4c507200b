"""`commbench slurm submit` refuses, in process and before anything exists, an --sbatch-arg that gives an option
commbench sets itself, a hostile value of a string field and a meaningless number; hostile values that are valid reach
the job literally. The cases run as a real submit (sbatch replaced by a recorder, so an accepted value would be seen,
not submitted); --dry-run checks the same options in the same place first (prepare_job), which one test shows.

Each rule is tested once per branch of the code that holds it and once per place a value enters: SPELLINGS has one
spelling per branch of check_sbatch_arg, every protected name and short letter is refused in its plain spelling,
FIELDS × hostile_values() gives each string field one value per branch of its checks, and one field holds every
control character. A new field is one line in FIELDS; an option commbench writes into the script is protected by
itself (read from a rendered script)."""

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


SPELLINGS = [
    # check_sbatch_arg's long branch: the exact name, bare or with its value in the next --sbatch-arg
    ["--nodes"], ["--nodes", "3"],
    # an abbreviation: unambiguous (sbatch reads --nod as --nodes) and ambiguous (sbatch refuses --n, a prefix of
    # --nodes, --ntasks, ...)
    ["--nod=3"], ["--n=3"],
    # neither pattern matches: a space inside or around it, upper case
    ["--nodes 3"], ["--nodes=3 "], [" --nodes"], ["--NODES=3"],
    # a control character, refused before the option is read ("--nodes\n": the `$` trap of a regex)
    ["--nodes\n"], ["--nodes=3\r\n"],
    # one dash and a long name: getopt reads -nodes=3 as -n odes=3
    ["-nodes=3"],
    # the short branch: the letter bare, with '=', after a space, before a line break, after a no-value flag
    ["-N"], ["-N=3"], ["-N 3"], ["-N3\n"], ["-vN3"],
]
"""One spelling per branch of check_sbatch_arg (commbench/slurm/script.py), on --nodes; every protected name and
letter is refused in its plain spelling by the tests below it."""


def _refused_sbatch_args(tmp_path: Path, submitted: list, values: list[str], *, dry_run: bool = False) -> str:
    args = [item for value in values for item in ("--sbatch-arg", value)]
    return _assert_refused_cleanly(_submit(tmp_path, args, dry_run=dry_run), tmp_path, submitted,
                                   fragment="--sbatch-arg")


@pytest.mark.parametrize("values", SPELLINGS, ids=repr)
@pytest.mark.no_process
def test_sbatch_arg_cannot_give_an_option_commbench_sets_in_any_spelling(tmp_path, submitted, values):
    _refused_sbatch_args(tmp_path, submitted, values)


@pytest.mark.no_process
def test_sbatch_arg_cannot_give_any_option_commbench_sets(tmp_path, submitted):
    """Every long name of the table (one rule: its names are the data of _SET_BY_COMMBENCH), with a value."""
    for name in PROTECTED:
        _refused_sbatch_args(tmp_path, submitted, [f"--{name}=3"])


@pytest.mark.no_process
def test_sbatch_arg_cannot_give_a_short_option_that_spells_one(tmp_path, submitted):
    """Every short letter of the table (the data of _SBATCH_SHORT_LONG), its value attached (-N3), and after each
    no-value flag of FLAGS_BEFORE."""
    for letter in SHORT:
        _refused_sbatch_args(tmp_path, submitted, [f"-{letter}3"])
    for flags in FLAGS_BEFORE:
        _refused_sbatch_args(tmp_path, submitted, [f"-{flags}N3"])


@pytest.mark.parametrize("value", [
    "--mem=0",  # a plain long option
    "--time-min=10", "--nodelist=n[1-2]",  # a protected name (--time, --nodes...) is a prefix of theirs, not theirs
    "--exclude=n2", "--open-mode=append",  # they share a prefix with a protected one (--exclusive, --output)
    "--comment=a,b", "--signal=B:USR1@60",  # the punctuation an #SBATCH value may hold
    "-wn1", "-H", "-Ovxn3",  # a short option's value takes the rest of the word; a flag alone; flags then a value
])
@pytest.mark.no_process
def test_other_sbatch_options_still_reach_the_script(tmp_path, value):
    result = _submit(tmp_path, ["--sbatch-arg", value], dry_run=True)
    assert result.exit_code == 0, result.stderr
    assert f"\n#SBATCH {value}\n" in result.stdout


@pytest.mark.no_process
def test_the_options_read_from_the_script_are_those_commbench_writes():
    # the table above was read from a rendered script; guard against an empty read passing everything
    assert {"nodes", "job-name", "output", "ntasks-per-node", "no-requeue", "gpus-per-node", "partition",
            "time", "exclusive", "cpus-per-task"} <= set(OWN_OPTIONS)


# --- string fields × hostile values ---------------------------------------------------------------------------------

def hostile_values(base: str) -> list[tuple[str, str]]:
    """(branch, value): one value per branch of the checks each field goes through. A C0 control at the end (the `$`
    trap of a regex), a C1 control and a Unicode line break are refused as control characters by
    refuse_control_characters (its Cc and Zl categories) or by a field's own pattern; a blank value by check_text_field
    or the field's pattern. test_every_control_character_is_refused_anywhere holds every control character."""
    return [("C0", base + "\n"), ("C1", base + "\x85"), ("Unicode line break", base + "\u2028"), ("blank", " ")]


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
"""Every place a string enters submit: each is checked by its own code (check_text_field, the #SBATCH patterns,
check_env_name, check_sbatch_arg, check_run_id, the container patterns), so each field gets every branch once."""
FIELD_CASES = [pytest.param(field, value, id=f"{field} {kind} {value!r}")
               for field, (base, _) in FIELDS.items() for kind, value in hostile_values(base)]


def _submit_field(tmp_path: Path, field: str, value: str, *, dry_run: bool = False):
    _, pass_value = FIELDS[field]
    if pass_value is None:
        return _submit(tmp_path, [], dry_run=dry_run, suite=value)
    return _submit(tmp_path, pass_value(value), dry_run=dry_run)


def _assert_field_refused(result, tmp_path: Path, submitted: list, field: str, value: str) -> None:
    line = _assert_refused_cleanly(result, tmp_path, submitted)
    assert field.split()[0] in line, line  # the message names the field...
    assert repr(value)[1:-1] in line or not value.strip(), line  # ...and shows the value, control characters visible


@pytest.mark.parametrize("field, value", FIELD_CASES)
@pytest.mark.no_process
def test_hostile_values_are_refused_in_every_field(tmp_path, submitted, field, value):
    _assert_field_refused(_submit_field(tmp_path, field, value), tmp_path, submitted, field, value)


@pytest.mark.no_process
def test_every_control_character_is_refused_anywhere(tmp_path, submitted):
    """One rule (refuse_control_characters: Unicode's Cc, Zl and Zp categories), so one field, --out, which nothing
    else checks (a pattern would refuse them too): every C0 control, DEL, every C1 control, the Unicode line and
    paragraph breaks and escape sequences, at the end, at the start and inside."""
    controls = [*map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xa0)), "\u2028", "\u2029"]
    assert all(unicodedata.category(char) in ("Cc", "Zl", "Zp") for char in controls)
    values = [value for char in controls for value in ("results" + char, char + "results", "res" + char + "ults")]
    for value in [*values, "results\x1b[31m", "\x1b]0;title\x07results", "results\r\n"]:
        _assert_field_refused(_submit_field(tmp_path, "--out", value), tmp_path, submitted, "--out", value)


@pytest.mark.no_process
def test_the_field_table_covers_every_string_option_of_submit():
    import click

    from commbench.cli.slurm import submit

    strings = {flag for param in submit.params if isinstance(param, click.Option) and param.type is click.STRING
               for flag in param.opts}
    assert strings == {field.split()[0] for field in FIELDS} - {"SUITE"}


@pytest.mark.no_process
def test_base_values_of_the_table_are_accepted(tmp_path, submitted):
    """Each hostile case differs from an accepted one by the hostile part only, so the refusal is the value's."""
    for field, (base, pass_value) in FIELDS.items():
        args = [] if pass_value is None else pass_value(base)
        folder = tmp_path / re.sub(r"\W", "_", field)
        folder.mkdir()
        result = _submit(folder, args, dry_run=True)
        assert result.exit_code == 0, (field, result.stderr)


# --- numbers --------------------------------------------------------------------------------------------------------

NUMBER_CASES = [("--nodes", "0"), ("--nproc-per-node", "0"), ("--cpus-per-task", "0"), ("--rdzv-port", "80"),
                ("--rdzv-port", "65536"), ("--rdzv-port", "1e4")]
"""The boundaries of validate()'s counts (commbench/slurm/script.py: a count of 0, a port below 1024 and above 65535)
and Click's INT refusing a float's spelling; -1 of every number option, and --wait-timeout and --poll's NaN, are in
tests/test_bad_numbers.py."""


@pytest.mark.parametrize("option, value", NUMBER_CASES)
@pytest.mark.no_process
def test_meaningless_numbers_are_refused(tmp_path, submitted, option, value):
    options = {"--nodes": "1", "--gpus-per-node": "0", option: value}
    args = [item for pair in options.items() for item in pair]
    result = invoke(["slurm", "submit", SUITE, *args, "--out", str(tmp_path / "results")], cwd=tmp_path)
    line = _assert_refused_cleanly(result, tmp_path, submitted)
    assert option in line, line


@pytest.mark.no_process
def test_gpus_per_node_0_is_a_cpu_node(tmp_path):
    result = _submit(tmp_path, [], dry_run=True)
    assert result.exit_code == 0 and "--gpus-per-node" not in result.stdout


# --- --dry-run refuses what a submit refuses ------------------------------------------------------------------------

@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "submit"])
@pytest.mark.no_process
def test_dry_run_and_submit_refuse_through_the_same_validation(tmp_path, submitted, dry_run):
    """The tables above run as a submit: both modes check the options in prepare_job before either branches off, so
    one case of each kind of refusal stands for the rest in both."""
    _refused_sbatch_args(tmp_path, submitted, ["--nodes=3"], dry_run=dry_run)
    _assert_field_refused(_submit_field(tmp_path, "SUITE", SUITE + "\n", dry_run=dry_run), tmp_path, submitted,
                          "SUITE", SUITE + "\n")
    _assert_field_refused(_submit_field(tmp_path, "--out", "results\n", dry_run=dry_run), tmp_path, submitted,
                          "--out", "results\n")
    result = _submit(tmp_path, ["--rdzv-port", "80"], dry_run=dry_run)
    _assert_refused_cleanly(result, tmp_path, submitted, fragment="--rdzv-port")


@pytest.mark.no_process
def test_dry_run_refuses_a_run_id_that_is_taken(tmp_path, submitted):
    (tmp_path / "results" / "r1").mkdir(parents=True)
    for dry_run in (True, False):
        result = _submit(tmp_path, ["--run-id", "r1"], dry_run=dry_run)
        assert_refused(result, fragment="already exists; choose another --run-id")
    assert not submitted and [path.name for path in tmp_path.rglob("*")] == ["results", "r1"]


# --- hostile but valid: quoted, and reaching the job literally ------------------------------------------------------

VALID_HOSTILE = ["a b", "a'\"b", "$(touch $CANARY.1)", "`touch $CANARY.2`", "; touch $CANARY.3", "back\\slash",
                 "ünïcødé ☃", "*", "~", "-x", "$HOME"]
"""One of each thing a shell reads in a word: a space, quotes, command substitution both ways, a command separator,
an escape, non-ASCII, a glob, a tilde, a leading dash, a variable."""
ENV_ONLY = ["line\nbreak", "esc\x1b[31m"]
"""Valid in an environment value only: it is one quoted shell word, and a value may hold these (a control character;
an escape sequence, which click.echo would strip from a --dry-run's script without color=True)."""


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


@pytest.mark.no_process
def test_an_env_value_with_nul_is_refused(tmp_path, submitted):
    result = _submit(tmp_path, ["--env", "COMMBENCH_PROBE=a\0b"], dry_run=False)
    _assert_refused_cleanly(result, tmp_path, submitted, fragment="NUL")
