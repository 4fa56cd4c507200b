"""nccl-tests' JSON output (-J FILE, JSON_FILE_VERSION 3, src/util.cu): args (argv, whose program names the test),
config (iterations, devices), results (per size: out_of_place / in_place objects with time or cpu_time, alg_bw,
bus_bw, nwrong; and with per-iteration timing, *_per_iter objects whose times_us become samples),
out_of_bounds and average_bus_bandwidth."""

import json
from typing import Any, cast

from commbench import names
from commbench.errors import CommbenchError
from commbench.imports.figures import check_busbw, mean_agrees, number
from commbench.imports.model import ImportedRow, ImportedTest, nccl_tests_time

_PLACEMENTS = (("out_of_place", False), ("in_place", True))
STARTED_FROM = "its start_time (nccl-tests -J), the local time of the machine that ran it (the file names no zone)"


def looks_like_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def written_by_commbench(text: str) -> tuple[str, str] | None:
    """(backend, device) of a file `commbench perf -J` wrote (its args start with commbench; nccl_version is null on
    gloo, and its devices say cpu on CPU ranks); None for nccl-tests' own files."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        return None
    args = document.get("args") if isinstance(document, dict) else None
    if not (isinstance(args, list) and args and str(args[0]).endswith("commbench")):
        return None
    devices = (document.get("config") or {}).get("devices") or []
    on_cpu = any(device.get("device_hex") == "cpu" for device in devices if isinstance(device, dict))
    return ("gloo" if document.get("nccl_version") is None else "nccl"), ("cpu" if on_cpu else "cuda")


def parse(text: str, file_name: str, *, collective: str | None, world_size: int | None
          ) -> tuple[str | None, list[ImportedTest]]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommbenchError(f"{file_name} is not valid JSON ({error.msg}, line {error.lineno}); pass the file "
                             "nccl-tests -J wrote, whole") from None
    if not (isinstance(document, dict) and isinstance(document.get("results"), list)
            and isinstance(document.get("config"), dict)):
        raise CommbenchError(f"{file_name} is JSON but not nccl-tests' -J output (no 'config' object and "
                             "'results' list); pass the file nccl-tests -J wrote")
    try:
        return _read(document, file_name, collective, world_size)
    except (KeyError, TypeError, ValueError) as error:
        raise CommbenchError(f"{file_name}: a result lacks or misspells a field nccl-tests writes ({error!s:.60}); "
                             "the file was cut or edited: pass the file nccl-tests -J wrote") from None


def _read(document: dict[str, Any], file_name: str, collective: str | None, world_size: int | None
          ) -> tuple[str | None, list[ImportedTest]]:
    # document: nccl-tests' JSON as loaded, its fields unchecked (Any): a missing or mistyped one raises the
    # KeyError, TypeError or ValueError that parse() turns into one message
    config = document["config"]
    test_name = next(filter(None, map(names.nccl_tests_program_in, document.get("args") or [])), None)
    if test_name is None and collective is None:
        raise CommbenchError(f"{file_name}: its args name no *_perf program; pass --collective NAME")
    if test_name is not None and collective is not None and names.NCCL_TESTS_COLLECTIVES[test_name] != collective:
        raise CommbenchError(f"{file_name}: --collective {collective} but its args run {test_name}_perf; drop "
                             "--collective (the file's name is used)")
    name = names.NCCL_TESTS_COLLECTIVES[test_name] if test_name else collective
    assert name is not None  # no *_perf in its args and no --collective raised above
    devices = config.get("devices") or []
    # each process writes one device entry (the first of its GPUs), so ranks = processes × threads × GPUs each
    world = len(devices) * int(config.get("nthreads") or 1) * int(config.get("ngpus") or 1) if devices else None
    if world is not None and world_size is not None and world != world_size:
        raise CommbenchError(f"{file_name}: --world-size {world_size} but its devices and config give {world} "
                             "ranks; drop --world-size")
    if world is None and world_size is None:
        raise CommbenchError(f"{file_name} lists no devices to tell the world size; pass --world-size N")
    test = ImportedTest(program=f"{test_name}_perf" if test_name else f"{name} (--collective)", line=None,
                        header=" ".join(document.get("args") or []), world_size=world or world_size)
    test.ranks = [{"rank": device["rank"], "host": device["hostname"], "device": device["device"],
                   "bus": device.get("device_hex"), "gpu": device.get("device_info")} for device in devices]
    calls = int(config["iterations"]) * int(config.get("aggregated_iterations") or 1)
    busbw_texts = []
    for result in document["results"]:
        for key, inplace in _PLACEMENTS:
            figures = result.get(key)
            if figures is None:
                continue
            time_text = _text(figures.get("time", figures.get("cpu_time")))
            per_iteration = result.get(f"{key}_per_iter") or {}
            test.rows.append(ImportedRow(
                collective=name, size_bytes=int(result["size"]), count=int(result["count"]),
                dtype=names.nccl_tests_dtype(result["type"]), op=names.nccl_tests_op(name, result["redop"]),
                inplace=inplace,
                time_us=number(time_text), algbw_gbps=number(_text(figures["alg_bw"])),
                busbw_gbps=number(_text(figures["bus_bw"])),
                printed={"time_us": time_text, "busbw_gbps": _text(figures["bus_bw"])},
                n_wrong=None if figures.get("nwrong") is None else int(number(_text(figures["nwrong"]))),
                calls_per_sample=calls, warmup=config.get("warmup_iters"),
                iters=1, more_times_us={"time_us_mean": number(time_text), **_per_iteration_figures(per_iteration)},
                samples_us=[float(value) for value in per_iteration.get("times_us") or []],
                note="" if figures.get("nwrong") is not None else "not checked (nwrong null)"))
            busbw_texts.append(_text(figures["bus_bw"]))
    _closing(test, document, busbw_texts, file_name)
    # world_size is None only in a file whose devices and config give 0 ranks, without --world-size
    check_busbw(test, lambda collective_name: names.busbw_factor(collective_name, cast(int, test.world_size)),
                names.why_no_busbw_factor)
    return (str(document["nccl_version"]) if document.get("nccl_version") is not None else None), [test]


def _text(value: str | float) -> str:
    """A JSON figure as text (json.loads keeps %lf's digits only as a float: repr gives them back); "nan" stays."""
    return value if isinstance(value, str) else repr(float(value))


def _per_iteration_figures(per_iteration: dict) -> dict:
    pairs = (("time_us_min", "min_us"), ("time_us_max", "max_us"), ("time_us_p95", "p95_us"),
             ("time_us_stdev", "stdev_us"))
    return {column: number(_text(per_iteration[key])) for column, key in pairs if key in per_iteration}


def _closing(test: ImportedTest, document: dict, busbw_texts: list[str], file_name: str) -> None:
    bounds, average = document.get("out_of_bounds") or {}, document.get("average_bus_bandwidth") or {}
    if "count" in bounds:
        test.closing["out_of_bounds"] = int(bounds["count"])
    if "bandwidth" in average:
        printed = _text(average["bandwidth"])
        mean, agrees = mean_agrees(busbw_texts, printed)
        test.closing.update(avg_busbw_gbps=number(printed), avg_busbw_gbps_from_rows=mean)
        if busbw_texts and not agrees:
            raise CommbenchError(f"{file_name}: average_bus_bandwidth {printed} does not match its results (they "
                                 f"average {mean:.6g} GB/s); results are missing or were edited")
    test.closing["collective"] = test.rows[0].collective if test.rows else None
    started = nccl_tests_time(document.get("start_time"))
    if started is not None:
        test.closing.update(started=started, started_from=STARTED_FROM)
