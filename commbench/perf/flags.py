"""nccl-tests' command-line flags (README and src/common.cu of nccl-tests 2.19), each with its meaning, and how each
becomes the equivalent `commbench sweep` option: `commbench perf` parses its flags into the sweep's options, so a perf
run is a sweep with nccl-tests' method (batch timing, both placements, the backend's own collective)."""

import difflib
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from commbench import names
from commbench.errors import CommbenchError
from commbench.names import BATCH, BUILTIN, RANK_AVERAGES
from commbench.units import format_bytes, parse_nccl_tests_size


@dataclass(frozen=True)
class Flag:
    short: str
    names: tuple[str, ...]
    """Long forms: nccl-tests' own first (--warmup_iters), then dashed spellings (--warmup-iters)."""
    meaning: str
    """nccl-tests' meaning of the flag, as its README and usage text say it."""
    metavar: str
    default: str | None
    """nccl-tests' default; None where commbench's target decides (-g)."""

    @property
    def key(self) -> str:
        """The Python name of the option's value (minbytes, warmup_iters, ...)."""
        return self.names[0].lstrip("-").replace("-", "_")

    @property
    def spelled(self) -> str:
        return f"{self.short}/{self.names[0]}"


def _flag(short: str, long: str, meaning: str, metavar: str, default: str | None, *aliases: str) -> Flag:
    dashed = long.replace("_", "-")
    names = (long, *((dashed,) if dashed != long else ()), *aliases)
    return Flag(short, names, meaning, metavar, default)


FLAGS = (
    _flag("-b", "--minbytes", "minimum size to start with (K/M/G: 1024-based)", "SIZE", "32M"),
    _flag("-e", "--maxbytes", "maximum size to end at (K/M/G: 1024-based)", "SIZE", "32M"),
    _flag("-i", "--stepbytes", "fixed increment between sizes, used when -f is 1", "SIZE", "1M"),
    _flag("-f", "--stepfactor", "multiplication factor between sizes (1 = use -i)", "FACTOR", "1"),
    _flag("-g", "--ngpus", "ranks on this node, one GPU each [default: every visible GPU, else 2 CPU ranks]",
          "N", None),
    _flag("-n", "--iters", "number of iterations: back-to-back calls timed as one batch", "N", "20"),
    _flag("-w", "--warmup_iters", "number of warmup iterations (not timed)", "N", "1"),
    _flag("-m", "--agg_iters", "number of operations to aggregate together in each iteration", "N", "1"),
    _flag("-c", "--check", "check iterations: verify the results N times per size (0 = no check)", "N", "1"),
    _flag("-d", "--datatype", f"datatype: {', '.join(names.NCCL_TESTS_TYPE_NAMES)} or all", "TYPE", "float"),
    _flag("-o", "--op", f"reduction: {', '.join(names.NCCL_TESTS_OP_NAMES)} or all", "OP", "sum"),
    _flag("-r", "--root", "root rank of broadcast and reduce", "RANK", "0"),
    _flag("-a", "--average", "report the time over ranks as 0 rank 0's, 1 their average, 2 the minimum, 3 the "
                             "maximum", "0-3", "1"),
    _flag("-z", "--blocking", "0 non-blocking; 1 wait and barrier after each iteration; 2 wait after each, no "
                              "barrier; 3 wait and barrier after each, the barrier not timed", "0-3", "0"),
    _flag("-G", "--cudagraph", "capture the iterations as a CUDA graph and replay it N times (GPUs only)", "N", "0"),
    _flag("-N", "--run_cycles", "run and print each size this many cycles", "N", "1"),
    _flag("-I", "--per_iter_timing", "1 = also time each iteration (i_min, i_max, i_p99, i_cv% columns)", "0|1",
          "0", "--per-iteration"),
    _flag("-J", "--output_file", "write nccl-tests' JSON to FILE (never over an existing file: FILE.0, FILE.1, ...)",
          "FILE", None, "--output-json"),
    _flag("-T", "--timeout", "seconds without progress before the run is ended as failed (0 = commbench's 300)",
          "SECONDS", "0"),
)
BY_SHORT = {flag.short: flag for flag in FLAGS}

UNSUPPORTED = {
    "-t": ("--nthreads", "1", "commbench runs one process per rank, not threads: use -g N for N ranks"),
    "-p": ("--parallel_init", "0", "torch initialises the process group; there is nothing to run in parallel"),
    "-y": ("--stream_null", "0", "torch issues collectives on its own streams"),
    "-C": ("--report_cputime", "0", "the host time per call is what -z 0 reports already on CPU; on GPUs commbench "
                                    "reports the time after the device finished"),
    "-S": ("--report_timestamps", "0", "the run folder's meta.json records start and end times"),
    "-R": ("--local_register", "0", "torch allocates and registers the buffers itself"),
    "-x": ("--cta_policy", "-1", "torch sets NCCL's communicator config; use NCCL_CTA_POLICY in the environment"),
    "-D": ("--device_implementation", "0", "device-API kernels are nccl-tests' own, not torch.distributed's"),
    "-V": ("--device_cta_count", "16", "device-API kernels are nccl-tests' own, not torch.distributed's"),
    "-M": ("--memory", "0", "GPU memory per point is in the run folder (gpu_mem columns) on GPUs"),
    "-u": ("--unalign", "0", "torch allocates aligned buffers; misaligned views are not offered"),
    "-K": ("--per_iter_skip", "0", "iteration_times.csv keeps every iteration; skip leading ones when you read it"),
}
"""nccl-tests flags commbench perf does not offer: (long name, the default it accepts as a no-op, why)."""

AVERAGES = dict(enumerate(RANK_AVERAGES))
"""-a 0/1/2/3 → commbench's --average (names.RANK_AVERAGES is in nccl-tests' order)."""


@dataclass(frozen=True)
class PerfRequest:
    """A parsed `commbench perf` command line: the sweep options it equals and what only perf does."""

    collective: str
    options: dict
    """The collective sweep's options (benches/collective.py CollectiveOptions field names) the flags equal."""
    settings: dict
    """nccl-tests' view of the run for its header and JSON config (minBytes, step, iters, ...)."""
    json_path: str | None
    """-J FILE."""
    per_iteration: bool
    """-I 1: per-iteration columns in the text and *_per_iter objects in the JSON."""
    notes: tuple[str, ...] = ()
    left_out: tuple[tuple[str, str], ...] = ()
    """(dtype, op) pairs of `-d all -o all` the backend cannot run while it runs both the type and the op otherwise
    (gloo averages floating types only): the sweep leaves out these pairs, not the op for every type."""


def collective_of(text: str) -> str:
    """COLLECTIVE as commbench or nccl-tests names it: all_reduce, all_reduce_perf, alltoall, all_to_all, ..."""
    from commbench.collectives import COLLECTIVES

    name = text.strip().removesuffix("_perf")
    name = names.NCCL_TESTS_COLLECTIVES.get(name, name)
    if name not in COLLECTIVES:
        runnable = ", ".join(names.nccl_tests_program(ours) for ours in COLLECTIVES)
        raise CommbenchError(f"unknown collective {text!r}; commbench perf runs {runnable} (or their commbench "
                             "names, e.g. all_reduce)")
    return name


def parse(collective_text: str, values: dict) -> PerfRequest:
    """The request a command line makes, checked without the machine: values maps each flag's key (Flag.key) to its
    text or None. A bad value is a CommbenchError in one line naming the flag and nccl-tests' meaning of it. `-d all`
    and `-o all` hold every type and op torch runs somewhere; fit_to() keeps those the run's backend has."""
    from commbench.collectives import get_collective

    collective = collective_of(collective_text)
    given = {key: value for key, value in values.items() if value is not None}
    # each flag's text; None only for -g and -J when not given (no default), which are read from given
    text: dict[str, Any] = {flag.key: given.get(flag.key, flag.default) for flag in FLAGS}
    minimum, maximum = _size(text, "-b"), _size(text, "-e")
    step, factor = _size(text, "-i"), _whole(text, "-f", lowest=1)
    if minimum > maximum:
        raise _bad(BY_SHORT["-b"], text["minbytes"], f"above -e {text['maxbytes']} ({minimum} > {maximum} B); "
                                                     "give -b ≤ -e")
    if minimum == 0 and factor > 1:
        raise _bad(BY_SHORT["-b"], text["minbytes"], "0 B times a factor never grows; start at 1 B or more")
    if factor <= 1 and step == 0 and minimum < maximum:
        raise _bad(BY_SHORT["-i"], text["stepbytes"], "adds nothing, so the sizes never reach -e; give -f 2 or -i "
                                                      "above 0")
    sizes = f"{max(minimum, 1)}:{maximum}:" + (f"x{factor}" if factor > 1 else f"+{max(step, 1)}")
    cycles = _whole(text, "-N", lowest=0)
    if cycles == 0:
        raise _bad(BY_SHORT["-N"], "0", "runs forever in nccl-tests; commbench runs a count it can store: give -N 1 "
                                        "or more")
    check = _whole(text, "-c", lowest=0)
    reduces = get_collective(collective).reduces
    options: dict[str, Any] = {  # CollectiveOptions field → value
        "collectives": (collective,), "sizes": sizes, "dtypes": _types(text["datatype"]),
        "ops": _ops(text["op"]) if reduces else None, "root": str(_root(text)),
        "nproc": None if "ngpus" not in given else str(_whole(text, "-g", lowest=1)),
        "impls": (BUILTIN,), "timings": (BATCH,), "placement": "both",
        "batch_calls": str(_whole(text, "-n", lowest=1)), "warmup": str(_whole(text, "-w", lowest=0)),
        "agg_iters": str(_whole(text, "-m", lowest=1)), "iters": str(cycles),
        "check": check > 0, "check_iters": str(max(check, 1)),
        "average": AVERAGES[_choice(text, "-a", AVERAGES)], "blocking": str(_choice(text, "-z", range(4))),
        "cuda_graph": str(_whole(text, "-G", lowest=0)),
        "iteration_times": _choice(text, "-I", (0, 1)) == 1,
    }
    timeout = _whole(text, "-T", lowest=0)
    if timeout:
        options["timeout"] = str(timeout)
    settings = {"program": names.nccl_tests_program(collective), "min_bytes": minimum, "max_bytes": maximum,
                "step": factor if factor > 1 else step, "step_kind": "factor" if factor > 1 else "bytes",
                "warmup_iters": int(options["warmup"]), "iters": int(options["batch_calls"]),
                "agg_iters": int(options["agg_iters"]), "validation": check, "graph": int(options["cuda_graph"]),
                "blocking": int(options["blocking"]), "per_iter_timing": options["iteration_times"],
                "run_cycles": cycles, "op": text["op"], "datatype": text["datatype"]}
    return PerfRequest(collective, options, settings, given.get("output_file"), options["iteration_times"])


def fit_to(request: PerfRequest, *, backend: str, device: str, nccl_version: tuple[int, ...] | None = None,
           gpu_capability: tuple[int, ...] | None = None) -> PerfRequest:
    """`-d all` and `-o all` narrowed to what this backend runs, each left-out type or op named in a note (nccl-tests
    runs every one NCCL has; a single type or op the backend lacks is refused by the sweep's own check, by name).

    A type is left out where the backend has no collective of it, an op where no type kept runs it; with both `all`,
    a type and an op that each run but not together (gloo averages floating types, not integers) leave out that
    pair only, so `-d all -o all` runs every pair `-d X -o Y` runs alone."""
    from commbench.backends import unsupported_reason

    def why(dtype: str, op: str) -> str | None:
        reason = unsupported_reason(backend=backend, device=device, collective=request.collective, dtype=dtype, op=op,
                                    nccl_version=nccl_version, gpu_capability=gpu_capability)
        return reason.split(";")[0] if reason else None

    options, notes = dict(request.options), list(request.notes)
    every_type = request.settings["datatype"] == "all"
    every_op = bool(options["ops"]) and request.settings["op"] == "all"
    if every_type:
        kept = [dtype for dtype in options["dtypes"] if not why(dtype, "sum")]
        notes += [f"-d all: {names.nccl_tests_type_name(dtype)} left out ({why(dtype, 'sum')})"
                  for dtype in options["dtypes"] if dtype not in kept]
        notes += [f"-d all: {name} left out (torch's NCCL and gloo backends have no {name} collectives)"
                  for name in names.UNREDUCED_DTYPES]
        options["dtypes"] = tuple(kept)
    left_out: list[tuple[str, str]] = []
    if options["ops"] and (every_type or every_op):
        dtypes, ops = list(options["dtypes"]), list(options["ops"])
        if every_op:  # an op no type of the run can take
            runs = [op for op in ops if any(not why(dtype, op) for dtype in dtypes)]
            notes += [f"-o all: {op} left out ({next(filter(None, (why(dtype, op) for dtype in dtypes)))})"
                      for op in ops if op not in runs]
            ops = runs or ops  # none left: the sweep's check refuses the first pair, by name
        if every_type:  # a type no op of the run can take
            runs = [dtype for dtype in dtypes if any(not why(dtype, op) for op in ops)]
            refused = [(dtype, next(filter(None, (why(dtype, op) for op in ops)))) for dtype in dtypes
                       if dtype not in runs]
            if refused and runs:
                notes.append(f"-d all: {_type_list(refused)} left out with -o {','.join(ops)}: {_reason(refused)}")
            dtypes = runs or dtypes
        if every_type and every_op:
            left_out = [(dtype, op) for op in ops for dtype in dtypes if why(dtype, op)]
            for op in dict.fromkeys(op for _, op in left_out):
                refused = [(dtype, why(dtype, op) or "") for dtype, pair_op in left_out if pair_op == op]
                runs = [dtype for dtype in dtypes if (dtype, op) not in left_out]
                notes.append(f"-o all: {op} runs for {_type_list([(dtype, '') for dtype in runs])}; left out for "
                             f"{_type_list(refused)} only: {_reason(refused)}")
        options["dtypes"], options["ops"] = tuple(dtypes), tuple(ops)
    return PerfRequest(request.collective, options, request.settings, request.json_path, request.per_iteration,
                       tuple(notes), tuple(left_out))


def _type_list(refused: list[tuple[str, str]]) -> str:
    return ", ".join(names.nccl_tests_type_name(dtype) for dtype, _ in refused)


def _reason(refused: list[tuple[str, str]]) -> str:
    """The backend's reasons for (dtype, reason) pairs, said once where they differ only in the type's name
    ("gloo cannot average int8, uint8, int32, int64 (it refuses AVG on integers)")."""
    patterns = {re.sub(rf"(?<!\w){re.escape(dtype)}(?!\w)", "{types}", reason) for dtype, reason in refused}
    pattern = next(iter(patterns))
    if len(patterns) == 1 and "{types}" in pattern:
        return pattern.replace("{types}", _type_list(refused))
    return "; ".join(f"{names.nccl_tests_type_name(dtype)}: {reason}" for dtype, reason in refused)


SWEEP_OPTIONS = {"--nproc": "-g", "--batch-calls": "-n", "--warmup": "-w", "--agg-iters": "-m",
                 "--check-iters": "-c", "--dtype": "-d", "--op": "-o", "--root": "-r", "--average": "-a",
                 "--blocking": "-z", "--cuda-graph": "-G", "--iters": "-N", "--iteration-times": "-I",
                 "--timeout": "-T", "--sizes": "-e"}
"""The sweep option each flag becomes, for messages the sweep's own checks raise about a perf run."""


def in_flags_terms(message: str) -> str:
    """A refusal of the sweep's checks said in nccl-tests' flags, with nccl-tests' meaning of the first one."""
    named = None
    for option, short in sorted(SWEEP_OPTIONS.items(), key=lambda item: -len(item[0])):
        pattern = re.compile(re.escape(option) + r"(?![\w-])")
        if pattern.search(message):
            message = pattern.sub(short, message)
            named = named or BY_SHORT[short]
    return f"{message} (nccl-tests {named.spelled}: {named.meaning})" if named else message


def refuse_unsupported(short: str, value: str) -> None:
    """An nccl-tests flag commbench perf lacks: its default is accepted as a no-op, any other value refused."""
    name, default, why = UNSUPPORTED[short]
    if value.strip() != default:
        raise CommbenchError(f"{short}/{name} {value} is not available in commbench perf: {why} "
                             f"(only its default, {short} {default}, is accepted)")


def resembling(option: str) -> str:
    """What to say of an unknown flag: the nccl-tests flag it resembles, with its meaning."""
    spelled = {name: flag for flag in FLAGS for name in (flag.short, *flag.names)}
    bare = option.split("=", 1)[0]
    close = difflib.get_close_matches(bare, list(spelled), n=1, cutoff=0.6)
    if not close and bare.startswith("--"):  # --warmup, --bytes: a word inside a flag's name
        word = bare[2:].replace("-", "_")
        close = [name for name in spelled if name.startswith("--") and word and word in name][:1]
    if not close:
        return f"unknown flag {bare}: it is not an nccl-tests flag commbench perf knows (`commbench perf --help`)"
    flag = spelled[close[0]]
    return f"unknown flag {bare}; the nccl-tests flag it resembles is {flag.spelled} ({flag.meaning})"


def _bad(flag: Flag, value: str, why: str) -> CommbenchError:
    return CommbenchError(f"{flag.spelled} {value}: {why} (nccl-tests: {flag.meaning})")


def _size(text: dict, short: str) -> int:
    flag = BY_SHORT[short]
    number = parse_nccl_tests_size(text[flag.key])
    if number is None:
        raise _bad(flag, text[flag.key], "not a size; give bytes, or a number with K, M or G (1024-based), e.g. 8G")
    if number >= 2**63:
        raise _bad(flag, text[flag.key], f"larger than any buffer ({format_bytes(2**62)} is already absurd)")
    return number


def _whole(text: dict, short: str, *, lowest: int) -> int:
    flag = BY_SHORT[short]
    try:
        number = int(text[flag.key].strip(), 0)  # nccl-tests reads numbers with strtol(base 0): 0x10 is 16
    except ValueError:
        raise _bad(flag, text[flag.key], "not a whole number") from None
    if number < lowest:
        raise _bad(flag, text[flag.key], f"must be {lowest} or more")
    return number


def _choice(text: dict, short: str, allowed: Collection[int]) -> int:
    number = _whole(text, short, lowest=0)
    if number not in allowed:
        raise _bad(BY_SHORT[short], text[BY_SHORT[short].key], f"choose {', '.join(map(str, allowed))}")
    return number


def _root(text: dict) -> int:
    value = text["root"].strip()
    if value in ("all", "-1"):
        raise _bad(BY_SHORT["-r"], value, "every rank as root in turn is not offered: commbench measures one root "
                                          "per run; give -r N")
    return _whole(text, "-r", lowest=0)


def _types(value: str) -> tuple[str, ...]:
    flag = BY_SHORT["-d"]
    if value == "all":
        return tuple(names.nccl_tests_dtype(name) for name in names.NCCL_TESTS_TYPE_NAMES
                     if name not in names.UNREDUCED_DTYPES)
    if value not in names.NCCL_TESTS_TYPE_NAMES:
        ours = {ours: theirs for theirs, ours in names.NCCL_TESTS_DTYPES.items()
                if theirs in names.NCCL_TESTS_TYPE_NAMES}
        hint = f"nccl-tests calls it {ours[value]}" if value in ours else \
            f"choose {', '.join(names.NCCL_TESTS_TYPE_NAMES)} or all"
        raise _bad(flag, value, f"not an nccl-tests type; {hint}")
    if value in names.UNREDUCED_DTYPES:
        raise _bad(flag, value, f"torch's NCCL and gloo backends have no {value} collectives; use "
                                f"{names.UNREDUCED_DTYPES[value]}")
    return (names.nccl_tests_dtype(value),)


def _ops(value: str) -> tuple[str, ...]:
    if value == "all":
        return names.NCCL_TESTS_OP_NAMES
    if value not in names.NCCL_TESTS_OP_NAMES:
        hint = " (PreMulSum has no torch.distributed op)" if value == "mulsum" else ""
        choices = ", ".join(names.NCCL_TESTS_OP_NAMES)
        raise _bad(BY_SHORT["-o"], value, f"not an nccl-tests op{hint}; choose {choices} or all")
    return (value,)
