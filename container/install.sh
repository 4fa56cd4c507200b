#!/usr/bin/env bash
# Installs commbench from SOURCE into an image's Python and leaves the image's torch as it was: NGC's torch is its
# own build (a version like 2.12.0a0+….nv26.05) that a plain `pip install` may replace with PyPI's. The installed
# torch is pinned in a constraints file, with NGC's own pins (/etc/pip/constraint.txt, named by PIP_CONSTRAINT from
# release 25.03): pip then fails rather than replace anything the image ships. Checked by tests/test_container.py.
#   usage: install.sh SOURCE        (PYTHON=... picks the interpreter; default python3)
set -euo pipefail
source_dir=${1:?usage: install.sh SOURCE (the folder holding pyproject.toml)}
python=${PYTHON:-python3}

torch_before=$("$python" -c 'from importlib.metadata import version; print(version("torch"))')
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==$torch_before" > "$constraints"
for pinned in ${PIP_CONSTRAINT:-}; do  # pip reads PIP_CONSTRAINT as a space-separated list of files
    if [ -f "$pinned" ]; then cat "$pinned" >> "$constraints"; fi
done

PIP_CONSTRAINT="$constraints" "$python" -m pip install --no-cache-dir "$source_dir"

torch_after=$("$python" -c 'from importlib.metadata import version; print(version("torch"))')
if [ "$torch_after" != "$torch_before" ]; then
    echo "install.sh: torch changed from $torch_before to $torch_after; the image's torch must stay" >&2
    exit 1
fi
"$python" -m commbench --version
echo "install.sh: commbench installed beside torch $torch_after"
