#!/usr/bin/env bash
# scripts/gpu_check.sh: the template's proof on a GPU: a bake's own benchmarks/gpu_check.sh, run on bakes made here.
#
# Here, where cookiecutter is (the template's uv environment), bake into .gpu-bakes/ (git ignores it; name it in
# the device tool's `carry`; GPU_CHECK_BAKES names another folder):
#     PYTHON=.venv/bin/python bash scripts/gpu_check.sh bake
# It bakes `ddp` (multi_gpu=ddp: the answer whose bake has every step, DDP included), `fp16`
# (default_precision=fp16) and `default` (the default answers). There, on the GPU machine (torch preinstalled,
# no network, no cookiecutter), one call runs the ddp bake's check within its time budget:
#     bash scripts/gpu_check.sh [--bake ddp|fp16|default] [--dry-run] [--only STEP,...] [--from STEP] [--fresh]
# Every argument after --bake goes to the bake's benchmarks/gpu_check.sh (its --help and --list say more).
# Results in $OUT (default ./gpu-check-out); a second call in the same command, another bake's too, appends
# its own section (the summary names each call's project and answers). Exit status: the bake's script's.

set -uo pipefail

TEMPLATE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BAKES_DIR=${GPU_CHECK_BAKES:-$TEMPLATE/.gpu-bakes} # where `bake` puts the bakes
PYTHON=${PYTHON:-python3}
declare -A ANSWERS=([ddp]="multi_gpu=ddp" [fp16]="default_precision=fp16" [default]="")

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

bake() { # every bake afresh, each in .gpu-bakes/NAME/<project>
    local name answers
    # Only a folder this function made (its config file marks it) is emptied: GPU_CHECK_BAKES may name any path
    if [[ -n $(ls -A "$BAKES_DIR" 2>/dev/null) && ! -f $BAKES_DIR/.cookiecutter.yaml ]]; then
        echo "error: $BAKES_DIR holds files this script did not bake; name an empty or new folder" >&2
        return 2
    fi
    rm -rf "$BAKES_DIR"
    mkdir -p "$BAKES_DIR"
    # A config file of our own: cookiecutter's replay files stay in .gpu-bakes, not in the home folder.
    printf 'cookiecutters_dir: "%s"\nreplay_dir: "%s"\n' "$BAKES_DIR/.cc" "$BAKES_DIR/.cc/replay" \
        >"$BAKES_DIR/.cookiecutter.yaml"
    for name in ddp fp16 default; do
        read -r -a answers <<<"${ANSWERS[$name]}"
        "$PYTHON" -m cookiecutter --no-input --config-file "$BAKES_DIR/.cookiecutter.yaml" -o "$BAKES_DIR/$name" \
            "$TEMPLATE" "${answers[@]}" >/dev/null || { echo "error: baking $name failed" >&2; return 1; }
        echo "baked $name (${ANSWERS[$name]:-default answers}): $(project_of "$name")"
    done
}

project_of() { dirname "$(dirname "$(find "$BAKES_DIR/$1" -path '*/benchmarks/gpu_check.sh' | head -n 1)")"; }

case ${1:-} in
-h | --help) usage; exit 0 ;;
bake) bake; exit ;;
esac

NAME=ddp
case ${1:-} in
--bake) NAME=${2:-}; shift 2 2>/dev/null || shift ;;
--bake=*) NAME=${1#--bake=}; shift ;;
esac
if [[ ! -v "ANSWERS[$NAME]" ]]; then
    echo "error: unknown bake '$NAME' (--bake ddp, fp16 or default)" >&2
    exit 2
fi
if [[ ! -f $(project_of "$NAME" 2>/dev/null)/benchmarks/gpu_check.sh ]]; then
    echo "error: no bake '$NAME' in $BAKES_DIR: run 'bash scripts/gpu_check.sh bake' first (needs cookiecutter)" >&2
    exit 2
fi
# Each bake's runs in a work folder of its own: a call on another bake never reads this one's checkpoints
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/gpu-check-work}
export OUT=${OUT:-$PWD/gpu-check-out} GPU_CHECK_WORK=$WORK/$NAME GPU_CHECK_COMMAND="bash scripts/gpu_check.sh --bake $NAME"
exec bash "$(project_of "$NAME")/benchmarks/gpu_check.sh" "$@"
