import json

import pytest
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


@pytest.mark.no_process
def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "commbench" in result.output


@pytest.mark.no_process
def test_a_proc_field_is_read_in_bytes_and_an_absent_or_garbled_one_is_none(tmp_path):
    """/proc/meminfo's kB fields as bytes; a field that is missing or not a number gives None, never a crash (a
    container's /proc may lack it)."""
    from commbench.machine import proc_kib_field

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16 kB\nMemAvailable:   garbled kB\n")
    assert proc_kib_field(str(meminfo), "MemTotal:") == 16 * 1024
    assert proc_kib_field(str(meminfo), "MemAvailable:") is None
    assert proc_kib_field(str(meminfo), "SwapTotal:") is None
    assert proc_kib_field(str(tmp_path / "absent"), "MemTotal:") is None
