"""nccl-tests' -J JSON (src/util.cu, JSON_FILE_VERSION 3) from a perf run: the keys, nesting and types nccl-tests
writes, so NVIDIA's tools/analyze_perf_json.py and `commbench import nccl-tests` read it.

Where commbench differs, it says so in the values, not the keys: nccl_version is null on gloo; env holds the variables
commbench records (NCCL_*, GLOO_*, TORCH_NCCL_*, OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES), not the whole environment;
a placement torch does not have is null (nccl-tests writes null for a body it did not run). One key is commbench's
own: a body whose time is not its cycle's own sample (samples.csv has none for it) says what stands in, under
TIME_STANDS_IN_KEY."""

import json
import math
from datetime import datetime
from pathlib import Path

from commbench.errors import CommbenchError
from commbench.perf.results import Body, Line, PerfRun

JSON_FILE_VERSION = 3
TIME_STANDS_IN_KEY = "commbench_time"
"""The key a body has where its time is not its cycle's own sample: what stands in for it, in words."""
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def reserve(path: str) -> Path:
    """Create the output file now, never over an existing one: nccl-tests tries FILE, then FILE.0, FILE.1, ..."""
    candidates = [Path(path)] + [Path(f"{path}.{index}") for index in range(1000)]
    for candidate in candidates:
        try:
            with open(candidate, "x", encoding="utf-8"):
                return candidate
        except FileExistsError:
            continue
        except OSError as error:
            raise CommbenchError(f"-J {path}: cannot create {candidate} ({error.strerror}); give a writable path"
                                 ) from None
    raise CommbenchError(f"-J {path}: {path} and {path}.0 to .999 all exist; give another path")


def document(run: PerfRun, *, argv: list[str], env: dict[str, str]) -> dict:
    settings, meta = run.settings, run.meta
    step_key = "step_factor" if settings.get("step_kind") == "factor" else "step_bytes"
    config = {
        "nthreads": 1, "ngpus": 1, "minimum_bytes": settings.get("min_bytes"),
        "maximum_bytes": settings.get("max_bytes"), step_key: settings.get("step"),
        "warmup_iters": settings.get("warmup_iters"), "iterations": settings.get("iters"),
        "aggregated_iterations": settings.get("agg_iters"), "validation": settings.get("validation"),
        "graph": settings.get("graph"), "blocking_collectives": bool(settings.get("blocking")),
        "per_iter_timing": bool(settings.get("per_iter_timing")), "per_iter_skip": 0, "parallel_init": False,
        "devices": [{"rank": rank["rank"], "group": 0, "pid": rank.get("pid") or 0, "hostname": rank.get("host"),
                     "device": rank.get("device_index") or 0, "device_hex": rank.get("bus"),
                     "device_info": rank.get("device")} for rank in meta.get("ranks") or []],
    }
    average = run.average_busbw_gbps
    return {
        "version": JSON_FILE_VERSION,
        "start_time": _local_time(meta.get("start_time")),
        "args": list(argv),
        "env": [f"{name}={value}" for name, value in env.items()],
        "nccl_version": _nccl_version_code(meta),
        "config": config,
        "results": [_result(line, settings) for line in run.lines],
        "out_of_bounds": {"count": run.out_of_bounds, "okay": run.out_of_bounds == 0},
        "average_bus_bandwidth": {"bandwidth": _number(average), "okay": "unchecked"},
        "errors": [],
        "end_time": _local_time(meta.get("end_time")),
    }


def write(path: Path, run: PerfRun, *, argv: list[str], env: dict[str, str]) -> None:
    path.write_text(json.dumps(document(run, argv=argv, env=env), indent=2) + "\n", encoding="utf-8")


def _result(line: Line, settings: dict) -> dict:
    result = {"size": line.size_bytes, "count": line.count, "type": line.type_name, "redop": line.redop,
              "root": "%6i" % line.root}
    for key, body in (("out_of_place", line.out_of_place), ("in_place", line.in_place)):
        result[key] = _body(body)
        if body is not None and body.iterations is not None:  # absent, not null: readers .get() it as a dict
            result[f"{key}_per_iter"] = _per_iteration(body)
    result["actual_iterations"] = settings.get("iters")
    result["experiment_name"] = ""
    return result


def _body(body: Body | None) -> dict | None:
    if body is None:
        return None
    figures = {"time": _number(body.time_us), "alg_bw": _number(body.algbw_gbps), "bus_bw": _number(body.busbw_gbps),
               "nwrong": None if body.n_wrong is None else float(body.n_wrong)}
    if body.time_stands_in is not None:  # only there: nccl-tests' readers see its keys and one more they skip
        figures[TIME_STANDS_IN_KEY] = f"time is {body.time_stands_in}"
    return figures


def _per_iteration(body: Body) -> dict:
    stats = body.iterations
    assert stats is not None  # called only for a body whose iterations are not None
    figures = {"skipped_iterations": 0, "min_us": stats.min, "max_us": stats.max, "avg_us": stats.avg,
               "p50_us": stats.p50, "p95_us": stats.p95, "p99_us": stats.p99, "stdev_us": stats.stdev,
               "cv_pct": stats.cv_pct, "times_us": list(stats.times_us)}
    if len(stats.per_rank_us) > 1:
        figures["per_process_max_times_us"] = [list(times) for times in stats.per_rank_us]
    return figures


def _number(value: float) -> float | str:
    """nccl-tests' jsonDouble writes NaN as the string "nan"."""
    return "nan" if isinstance(value, float) and math.isnan(value) else value


def _local_time(iso: str | None) -> str | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso).astimezone().strftime(_TIME_FORMAT)


def _nccl_version_code(meta: dict) -> int | None:
    """NCCL's version as ncclGetVersion's code (2.29.7 → 22907); null on gloo."""
    if meta.get("backend") != "nccl":
        return None
    try:
        major, minor, patch = (int(part) for part in str(meta.get("backend_version")).split(".")[:3])
    except ValueError:
        return None
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch
