"""The container recipe (container/Dockerfile, docs/container.md). No test builds the image: that needs the network
and NGC's multi-GB base. What can be checked here is checked for real: the Dockerfile copies only what exists and
what .dockerignore lets through, and its install step (container/install.sh) runs against this machine's torch in a
fresh virtual environment, offline, keeping torch and failing rather than replacing a package the image pins."""

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.test_packaging import _run, _see_these_site_packages

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "container" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    lines = [line for line in DOCKERFILE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


@pytest.mark.no_process
def test_the_base_is_an_ngc_pytorch_release_that_a_build_arg_can_change():
    args = [value for name, value in _instructions() if name == "ARG"]
    assert any(re.fullmatch(r"BASE_IMAGE=nvcr\.io/nvidia/pytorch:\d\d\.\d\d-py3", value) for value in args), args
    assert ("FROM", "${BASE_IMAGE}") in _instructions()


@pytest.mark.no_process
def test_every_copied_path_exists_and_passes_the_dockerignore():
    allowed = [line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.startswith("!")]
    copied = [source for name, value in _instructions() if name == "COPY" for source in value.split()[:-1]]
    assert copied
    for source in copied:
        assert (REPO / source).exists(), source
        assert any(source == entry or source.startswith(entry + "/") for entry in allowed), source
    # the package's data (suites, the sbatch template) travel inside commbench/, not as the repository's symlinks
    assert (REPO / "commbench" / "data" / "suites" / "default.toml").is_file()
    assert any(name == "RUN" and "container/install.sh" in value for name, value in _instructions())


@pytest.fixture()
def image_like(tmp_path) -> dict:
    """A fresh venv that sees this environment's torch and libraries, as an image's Python sees the base's, and a
    copy of what the Dockerfile copies."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    _see_these_site_packages(venv)
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "commbench", source / "commbench", ignore=shutil.ignore_patterns("__pycache__"))
    # offline: every dependency is already installed, and the build backend is this environment's setuptools
    env = {"PYTHON": str(venv / "bin" / "python"), "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    return {"venv": venv, "source": source, "env": env}


def _install(image_like: dict, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **image_like["env"], **(extra_env or {})}
    env.pop("PYTHONPATH", None)  # the installed commbench must not come from the checkout
    return subprocess.run(["bash", REPO / "container" / "install.sh", image_like["source"]], env=env,
                          capture_output=True, text=True, timeout=600, cwd=image_like["source"].parent)


def test_install_keeps_the_images_torch_and_installs_commbench(image_like):
    done = _install(image_like)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    torch_version = metadata.version("torch")
    assert f"beside torch {torch_version}" in done.stdout
    found = _run([image_like["venv"] / "bin" / "python", "-c", "import commbench, torch; "
                  "print(commbench.__file__); print(torch.__version__)"], cwd=image_like["venv"])
    location, imported_torch = found.stdout.split()
    assert Path(location).is_relative_to(image_like["venv"]) and imported_torch == torch_version


def test_install_fails_rather_than_replace_a_package_the_image_pins(image_like, tmp_path):
    """NGC's /etc/pip/constraint.txt (PIP_CONSTRAINT) pins what the image ships: a pin the installed package does
    not meet must stop the install, not replace the package."""
    pins = tmp_path / "constraint.txt"
    pins.write_text(f"pandas!={metadata.version('pandas')}\n")  # met only by replacing the pandas installed here
    done = _install(image_like, {"PIP_CONSTRAINT": str(pins)})
    assert done.returncode != 0
    assert "pandas" in done.stdout + done.stderr
    assert not (image_like["venv"] / "bin" / "commbench").exists()
