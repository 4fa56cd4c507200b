"""The wheel: it carries the suites and the sbatch template, and an installed commbench runs them from any folder.

The wheel is built from a copy of the source tree (so no build/ or stale build/lib files in the checkout leak in),
installed into a fresh virtual environment that reuses the torch, pandas etc. of the environment the tests run in
(a venv or not), and run from an empty folder without PYTHONPATH, the way a user runs it after `pip install commbench`.
"""

import json
import shutil
import site
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import commbench_env

pytestmark = pytest.mark.distributed  # `commbench run cpu-ci` starts torchrun and two gloo ranks

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DATA = ["commbench/data/slurm/commbench.sbatch", "commbench/data/suites/cpu-ci.toml",
                "commbench/data/suites/default.toml"]
NOT_SOURCES = ("build", "dist", "*.egg-info", ".git", "__pycache__", ".pytest_cache", "results", "plots",
               "test-artifacts", "tests", "benchmarks")


def _run(command: list, *, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # No PYTHONPATH: a test run sets it to the checkout, and the installed commbench must not come from there
    env = {key: value for key, value in commbench_env().items() if key != "PYTHONPATH"}
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(completed: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert completed.returncode == 0, f"{completed.args}:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    return completed


def _build_isolation_flags() -> list[str]:
    # setuptools >= 70.1 builds wheels by itself: with it installed here, build without an isolated environment (no
    # download from PyPI, works offline, seconds faster); otherwise pip fetches the build-system requirements.
    try:
        major, minor = (int(part) for part in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if (major, minor) >= (70, 1) else []


def _see_these_site_packages(venv: Path) -> None:
    """Make the venv see the site-packages of the Python running the tests, after its own. `venv
    --system-site-packages` would give it the base interpreter's instead, which inside a venv lacks what the venv
    installed (rich, say). The folders go in as plain path lines of a .pth file, so the .pth files inside them (an
    editable commbench's finder among them) are not run: the wheel's commbench is the only one installed."""
    purelib = _ok(_run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       cwd=venv)).stdout.strip()
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    (Path(purelib) / "tests_environment.pth").write_text("".join(f"{folder}\n" for folder in folders))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the wheel and install it into a new virtual environment: the wheel's path and the venv's bin folder."""
    root = tmp_path_factory.mktemp("packaging")
    timings = {}
    start = time.perf_counter()
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", *_build_isolation_flags(), "-w", root / "wheels",
              source], cwd=root))  # an absolute path: a bare folder name would be looked up on PyPI
    (wheel,) = (root / "wheels").glob("commbench-*.whl")
    timings["build_s"] = time.perf_counter() - start

    start = time.perf_counter()
    venv = root / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root))
    _see_these_site_packages(venv)
    # This Python's pip installs into the venv (pip >= 22.3: --python). --ignore-installed: a commbench installed
    # where the tests run (an editable checkout) must not count as already there; --no-deps: torch etc. come from
    # the site-packages the venv sees.
    _ok(_run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps",
              "--ignore-installed", wheel], cwd=root))
    timings["install_s"] = time.perf_counter() - start
    print(f"wheel build {timings['build_s']:.1f} s, venv + install {timings['install_s']:.1f} s")
    return {"wheel": wheel, "bin": venv / "bin", "venv": venv}


def test_wheel_holds_the_suites_and_the_template_and_declares_tomli(installed):
    with zipfile.ZipFile(installed["wheel"]) as wheel:
        names = set(wheel.namelist())
        (metadata_name,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip() for line in wheel.read(metadata_name).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    missing = [name for name in SHIPPED_DATA if name not in names]
    assert not missing, f"not in the wheel: {missing}"
    assert len([name for name in names if name.startswith("commbench/data/suites/")]) >= 6
    tomli = [requirement for requirement in requires if requirement.startswith("tomli")]
    assert tomli and "python_version < \"3.11\"" in tomli[0].replace("'", '"'), requires


def test_installed_commbench_is_the_wheels(installed, tmp_path):
    out = _ok(_run([installed["bin"] / "python", "-c", "import commbench; print(commbench.__file__)"], cwd=tmp_path))
    location = Path(out.stdout.strip())
    assert location.is_relative_to(installed["venv"]), f"commbench imported from {location}, not the venv"


def test_installed_commbench_runs_a_shipped_suite_from_an_empty_folder(installed, tmp_path):
    start = time.perf_counter()
    _ok(_run([installed["bin"] / "commbench", "run", "cpu-ci", "--quiet"], cwd=tmp_path))
    print(f"commbench run cpu-ci: {time.perf_counter() - start:.1f} s")
    (run_dir,) = (tmp_path / "results").iterdir()
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "complete", meta
    assert Path(meta["suite"]).is_relative_to(installed["venv"])  # the suite shipped in the wheel
    results = pd.read_csv(run_dir / "gate" / "results.csv")
    assert not results.empty and (results["n_wrong"] == 0).all()


def test_installed_slurm_dry_run_prints_the_script_and_creates_nothing(installed, tmp_path):
    out = _ok(_run([installed["bin"] / "commbench", "slurm", "submit", "cpu-ci", "--nodes", "1", "--gpus-per-node",
                    "0", "--dry-run"], cwd=tmp_path))
    assert "#SBATCH --nodes=1" in out.stdout and "-m commbench run" in out.stdout, out.stdout
    assert not list(tmp_path.iterdir())
