"""The files shipped inside the package (suites, the sbatch template), found where the package itself is installed.

They live in commbench/data/ rather than at the top of the repository so that a wheel or `pip install .` carries them;
the repository's suites/ and slurm/ are symlinks to these folders. Light on purpose: no torch, no click.
"""

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

_DATA = files("commbench") / "data"
_SUITES = _DATA / "suites"
_SBATCH_TEMPLATE = _DATA / "slurm" / "commbench.sbatch"


def suite_names() -> list[str]:
    """The shipped suites by name (`default`, `cpu-ci`, ...), sorted."""
    if not _SUITES.is_dir():
        return []
    return sorted(item.name.removesuffix(".toml") for item in _SUITES.iterdir()
                  if item.is_file() and item.name.endswith(".toml"))


def shipped_suite(name: str) -> Path | None:
    """The file of the shipped suite `name`, or None. Only known names: a name like '../x' never walks out."""
    if name not in suite_names():
        return None
    return _real_path(_SUITES / f"{name}.toml")


def sbatch_template() -> str:
    """The text of the sbatch template that `commbench slurm submit` fills in."""
    return _SBATCH_TEMPLATE.read_text(encoding="utf-8")


def sbatch_template_name() -> str:
    """Where the template is, for error messages (its path when installed as files, which is how pip installs)."""
    return str(_SBATCH_TEMPLATE)


def _real_path(resource: Traversable) -> Path:
    # A suite's path is recorded and its file copied into the run folder, so it must be a file on disk; pip installs
    # packages as files (a zipped package would need importlib.resources.as_file and a temporary copy).
    if not isinstance(resource, Path):
        raise RuntimeError(f"commbench's data is not on disk ({resource}); install commbench unzipped")
    return resource
