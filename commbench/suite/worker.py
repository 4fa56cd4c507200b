"""Rank entry point of a suite launch: run the named benches of a prepared suite folder in one process group."""

import argparse
import importlib
import json
import sys
from pathlib import Path

from commbench import store
from commbench.distributed import shared_process_group
from commbench.worker import WATCHED_TIMEOUT_GRACE_S


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="commbench suite rank (started by `commbench run`)")
    parser.add_argument("--suite-dir", type=Path, required=True)
    parser.add_argument("benches", nargs="+", help="bench folders to run, in order")
    args = parser.parse_args(argv)
    workers = {bench["name"]: bench["worker_module"] for bench in store.read_meta(args.suite_dir)["benches"]}
    specs = [json.loads((args.suite_dir / name / store.SPEC_FILE).read_text(encoding="utf-8"))
             for name in args.benches]
    # every bench of a suite runs on the same backend and device (the suite sets them once)
    timeout_s = max(spec["timeout_s"] for spec in specs) + WATCHED_TIMEOUT_GRACE_S
    with shared_process_group(backend=specs[0]["backend"], device_type=specs[0]["device"], timeout_s=timeout_s):
        for name in args.benches:
            importlib.import_module(workers[name]).run_in_dir(args.suite_dir / name)


if __name__ == "__main__":
    main(sys.argv[1:])
