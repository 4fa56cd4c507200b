"""The result schema and its files under results/<run-id>/: meta.json, results.csv, samples.csv.

Rank 0 appends and flushes one row per finished point, so a crash loses nothing already measured; readers drop a
torn last line. Every file carries schema_version: newer files are refused, foreign ones named as such.
"""

import csv
import io
import json
import os
import platform
import re
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from commbench.errors import CommbenchError
from commbench.profiling.nvml_sampler import SAMPLE_FIELDS, SUMMARY_COLUMNS

SCHEMA_VERSION = 1
META_FILE, RESULTS_FILE, SAMPLES_FILE, GPU_SAMPLES_FILE, SPEC_FILE, LAUNCH_LOG = (
    "meta.json", "results.csv", "samples.csv", "gpu_samples.csv", "spec.json", "launch.log")

STATUS_RUNNING, STATUS_COMPLETE, STATUS_FAILED = "running", "complete", "failed"

KEY_COLUMNS = ["bench", "collective", "impl", "backend", "device", "world_size", "dtype", "op", "inplace",
               "size_bytes"]
RESULT_COLUMNS = ["schema_version", "run_id", *KEY_COLUMNS, "count", "iters", "warmup", "stop_reason",
                  "time_us_p50", "time_us_p95", "time_us_min", "time_us_mean", "time_us_stdev",
                  "time_us_ci_lo", "time_us_ci_hi", "algbw_gbps", "busbw_gbps", "bytes_sent_per_rank", "bytes_source",
                  "ring_chunks", "n_wrong", *SUMMARY_COLUMNS]
SAMPLE_COLUMNS = ["schema_version", "run_id", *KEY_COLUMNS, "iteration", "time_us"]

# Training sweeps (bench ddp / fsdp / strategy) write the same files with their own columns: one row per
# configuration; settings that do not apply to a configuration are empty.
TRAIN_KEY_COLUMNS = ["bench", "config_index", "config"]
TRAIN_RESULT_COLUMNS = [
    "schema_version", "run_id", *TRAIN_KEY_COLUMNS, "strategy", "impl", "backend", "device", "world_size",
    "model_kind", "params", "layers", "hidden", "heads", "seq_len", "micro_batch", "accum_steps", "global_batch",
    "bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook", "reshard_after_forward",
    "forward_prefetch", "backward_prefetch", "limit_all_gathers", "wrap", "mixed_precision", "shard_group",
    "steps", "warmup_steps", "step_time_ms_p50", "step_time_ms_p95", "step_time_ms_min", "step_time_ms_mean",
    "step_time_ms_ci_lo", "step_time_ms_ci_hi", "samples_per_s", "tokens_per_s", "step_time_ms_nosync_p50",
    "exposed_comm_ms_nosync", "comm_ms", "exposed_comm_ms", "overlap_pct", "comm_calls", "comm_msg_elems",
    "comm_msg_elems_predicted", "comm_bytes_per_rank_predicted", "bucket_count", "bucket_sizes_bytes",
    "ddp_backward_comm_ms", "ddp_comm_overlap_ms", "peak_mem_bytes", "peak_mem_reserved_bytes",
    "gpu_mem_used_peak_bytes", "mem_carryover_bytes", "memory_budget_bytes", "fits", "model_state_bytes",
    "model_param_bytes", "model_grad_bytes", "model_optim_bytes", "optim_scalar_bytes",
    "model_state_bytes_predicted", "model_state_exact_ranks", "model_state_formula", "model_state_bytes_formula",
    "loss_last", "n_wrong"]
TRAIN_SAMPLE_COLUMNS = ["schema_version", "run_id", *TRAIN_KEY_COLUMNS, "phase", "step", "step_time_ms"]
TRAIN_BENCHES = ("ddp", "fsdp", "strategy")
GPU_SAMPLE_COLUMNS = ["schema_version", "run_id", *KEY_COLUMNS, *SAMPLE_FIELDS]


class RowWriter:
    """Appends rows to one CSV, writing the header once; each row reaches the disk before the call returns."""

    def __init__(self, path: Path, columns: list[str]):
        self._columns = columns
        new_file = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="", encoding="utf-8")
        if new_file:
            self._write([columns])

    def write(self, rows: list[dict]) -> None:
        self._write([[row[column] for column in self._columns] for row in rows])  # a missing column is a bug

    def _write(self, rows: list[list]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        self._file.write(buffer.getvalue())  # one write per batch keeps a killed writer from interleaving rows
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def write_meta(run_dir: Path, meta: dict) -> None:
    """Replace meta.json atomically so a reader (or a crash) never sees half a file."""
    temporary = run_dir / f".{META_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(temporary, run_dir / META_FILE)


def read_meta(run_dir: Path) -> dict:
    path = Path(run_dir) / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _not_found(path) from None
    except json.JSONDecodeError as error:
        raise CommbenchError(f"{path} is not valid JSON ({error.msg}); it was not written by commbench") from None
    _check_version(path, meta.get("schema_version"))
    return meta


def update_meta(run_dir: Path, **fields) -> dict:
    meta = read_meta(run_dir)
    meta.update(fields)
    write_meta(run_dir, meta)
    return meta


def read_rows(path: Path, required: list[str]) -> pd.DataFrame:
    """A results or samples CSV as a DataFrame; a torn last line from a crash is dropped."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _not_found(path) from None
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    header = text.split("\n", 1)[0].split(",") if text else []
    missing = [column for column in required if column not in header]
    if missing:
        raise CommbenchError(f"{path} is not a commbench results file (missing columns {', '.join(missing[:4])}); "
                             "pass a results.csv that commbench wrote")
    frame = pd.read_csv(io.StringIO(text))
    for version in frame["schema_version"].dropna().unique():
        _check_version(path, int(version))
    return frame


# A results file must have these; columns added later (ring bytes, GPU sampling) are filled in empty when absent.
CORE_RESULT_COLUMNS = ["schema_version", *KEY_COLUMNS, "count", "iters", "warmup", "time_us_p50", "time_us_p95",
                       "time_us_min", "time_us_mean", "time_us_ci_lo", "time_us_ci_hi", "algbw_gbps", "busbw_gbps",
                       "n_wrong"]


def is_training_run(run_dir: Path) -> bool:
    """Whether results/<run> holds training rows (from `commbench ddp|fsdp|zero`) rather than collective rows."""
    path = Path(run_dir) / RESULTS_FILE
    try:
        with open(path, encoding="utf-8") as file:
            return "step_time_ms_p50" in file.readline().split(",")
    except FileNotFoundError:
        raise _not_found(path) from None


def run_id_of(run_dir: Path) -> str:
    """The run_id its rows carry: the folder name, or suite-run/bench for a bench of a suite."""
    return read_meta(run_dir).get("run_id") or Path(run_dir).name


def suite_bench_dirs(run_dir: Path) -> dict[str, Path] | None:
    """The bench folders of a suite run (`commbench run`), by bench name; None when run_dir is not a suite run."""
    path = Path(run_dir) / META_FILE
    if not path.exists():
        return None
    meta = read_meta(run_dir)
    if meta.get("kind") != "suite":
        return None
    return {bench["name"]: Path(run_dir) / bench["name"] for bench in meta.get("benches", [])}


def read_results(run_dir: Path, *, expect: str | None = None) -> pd.DataFrame:
    """Collective or training rows, whichever the run holds (column `bench` tells them apart); expect
    "collective" or "training" refuses the other kind with a one-line error."""
    training = is_training_run(run_dir)
    if expect is not None and training != (expect == "training"):
        found = "a training sweep (commbench ddp/fsdp/zero)" if training else "a collective sweep (commbench sweep)"
        raise CommbenchError(f"{run_dir} holds {found}; pass the run folder of a {expect} sweep")
    if training:
        return read_rows(Path(run_dir) / RESULTS_FILE, TRAIN_RESULT_COLUMNS)
    frame = read_rows(Path(run_dir) / RESULTS_FILE, CORE_RESULT_COLUMNS)
    for column in RESULT_COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    return frame


def read_samples(run_dir: Path) -> pd.DataFrame:
    return read_rows(Path(run_dir) / SAMPLES_FILE, SAMPLE_COLUMNS)


def _not_found(path: Path) -> CommbenchError:
    return CommbenchError(f"{path} does not exist: point at a results/<run-id> folder written by commbench")


def _check_version(path: Path, version) -> None:
    if version is None:
        raise CommbenchError(f"{path} has no schema_version: it was not written by commbench")
    if int(version) > SCHEMA_VERSION:
        raise CommbenchError(f"{path} has schema_version {version}, newer than this commbench reads "
                             f"({SCHEMA_VERSION}); upgrade commbench")


_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def default_run_id() -> str:
    """UTC time + host, e.g. 20261129T084512Z-node17: sorts by time, tells machines apart."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", platform.node().split(".")[0]) or "host"
    return f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{host}"


def create_run_dir(out: Path, run_id: str | None) -> Path:
    """Make results/<run-id>/ atomically; a taken default id gets a -2, -3… suffix, a taken chosen one is refused."""
    out = Path(out)
    if run_id is not None and not _RUN_ID.match(run_id):
        raise CommbenchError(f"--run-id {run_id!r} is not a folder name; use letters, digits, '.', '_' and '-'")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CommbenchError(f"cannot create --out {out}: {error.strerror}; choose a writable folder") from None
    if run_id is not None:
        try:
            (out / run_id).mkdir()
        except FileExistsError:
            raise CommbenchError(f"{out / run_id} already exists; choose another --run-id") from None
        return out / run_id
    base = default_run_id()
    for attempt in range(1, 1000):
        candidate = out / (base if attempt == 1 else f"{base}-{attempt}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise CommbenchError(f"cannot find a free run id under {out}; pass --run-id")
