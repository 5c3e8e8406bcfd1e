#!/usr/bin/env bash
# One entry of the version matrix (tests/test_versions.py): a fresh uv environment on one Python with one
# torch/torchvision pair and the project's [test] extra, then the project's quick tier and its export round trip.
#
#   scripts/versions/check.sh UV PYTHON TORCH TORCHVISION PROJECT VENV [TIMM]
#
# UV: the uv executable; PYTHON: an interpreter's path (uv cannot download one offline); TORCH, TORCHVISION:
# release series such as 2.4 and 0.19 (the newest patch release of each is installed); PROJECT: a baked
# project, installed editable as its README says; VENV: where to create the environment; TIMM: a timm release to
# pin (the [timm] extra's floor), else the newest. Packages come from
# the index through uv's default cache, shared by every entry and run, so only a first run downloads torch.
# Prints one line of timings (seconds) last: "install I quick Q export E".
set -euo pipefail
uv=$1 python=$2 torch=$3 torchvision=$4 project=$5 venv=$6 timm=${7:-}

started=$SECONDS
"$uv" venv --quiet --python "$python" "$venv"
"$uv" pip install --quiet --python "$venv/bin/python" -e "$project[test]" "torch==$torch.*" "torchvision==$torchvision.*" \
    ${timm:+"timm==$timm"}
install=$((SECONDS - started))

cd "$project"
pytest=("$venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$venv.tmp")
started=$SECONDS
"${pytest[@]}" -m "not slow"
quick=$((SECONDS - started))
started=$SECONDS
"${pytest[@]}" -m slow tests/test_export.py  # the ONNX and .pt2 round trips: export, reload, predict alike
export=$((SECONDS - started))
rm -rf "$venv.tmp"  # the runs' checkpoints: gigabytes an entry, on a disk the other entries share
echo "install $install quick $quick export $export"
