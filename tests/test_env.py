import json

import torch
from click.testing import CliRunner

from commbench.cli import main


def test_env_names_the_default_sweep():
    result = CliRunner().invoke(main, ["env"])
    assert result.exit_code == 0, result.output
    assert f"torch {torch.__version__}" in result.output
    assert "gloo (bundled with torch" in result.output
    if torch.cuda.is_available():
        assert "default sweep: --backend nccl --device cuda" in result.output
    else:
        assert "this is a CPU-only machine" in result.output
        assert "default sweep: --backend gloo --device cpu --nproc 2" in result.output


def test_env_json_is_machine_readable():
    result = CliRunner().invoke(main, ["env", "--json"])
    report = json.loads(result.output)
    assert report["backends"]["gloo"]
    assert report["nvml"]["available"] in (True, False)
    assert report["default"]["nproc"] >= 1


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "commbench" in result.output
