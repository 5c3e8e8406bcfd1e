#!/usr/bin/env bash
# scripts/gpu_check.sh: the template's twin of a bake's benchmarks/gpu_check.sh, over three bakes.
#
# Here, where cookiecutter is (the template's uv environment), bake the default, default_precision=fp16 and
# multi_gpu=ddp answers into .gpu-bakes/ (git ignores it; name it in the device tool's `carry`; GPU_CHECK_BAKES
# names another folder):
#     PYTHON=.venv/bin/python bash scripts/gpu_check.sh bake
# There, on the GPU machine (torch preinstalled, no network, no cookiecutter), run each bake's script:
#     bash scripts/gpu_check.sh [--dry-run] [BAKE:]PHASE...
# PHASE as in benchmarks/gpu_check.sh (tests, cuda, train, compile, bench); BAKE (default, fp16, ddp) picks the
# bake, the default bake when left out. The other bakes differ from the default in their defaults only, and
# their quick tiers run in CI: on the GPU their CUDA tier (`cuda`) is what is new. The full proof, in three
# calls that each fit one 10-minute command with room (GPU_CHECK_BUDGET_S, default 480, bounds a whole call):
#     bash scripts/gpu_check.sh default:tests fp16:cuda
#     bash scripts/gpu_check.sh default:train ddp:cuda
#     bash scripts/gpu_check.sh default:compile default:bench
# Results in $OUT (default ./gpu-check-out): summary.txt (each run's table under its bake's name, and which
# bakes the budget left unchecked), results.tsv (with a bake column), env.txt, logs.tgz (each run's own four
# files). Exit 0 when every step ran and passed, 1 when one failed, 3 when none failed but the time budget
# left steps unrun, 2 for a bad argument or no GPU.

set -uo pipefail

TEMPLATE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BAKES_DIR=${GPU_CHECK_BAKES:-$TEMPLATE/.gpu-bakes} # where `bake` puts the bakes
PYTHON=${PYTHON:-python3}
declare -A ANSWERS=([default]="" [fp16]="default_precision=fp16" [ddp]="multi_gpu=ddp")

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
    for name in default fp16 ddp; do
        read -r -a answers <<<"${ANSWERS[$name]}"
        "$PYTHON" -m cookiecutter --no-input --config-file "$BAKES_DIR/.cookiecutter.yaml" -o "$BAKES_DIR/$name" \
            "$TEMPLATE" "${answers[@]}" >/dev/null || { echo "error: baking $name failed" >&2; return 1; }
        echo "baked $name (${ANSWERS[$name]:-default answers}): $(project_of "$name")"
    done
}

project_of() { dirname "$(dirname "$(find "$BAKES_DIR/$1" -path '*/benchmarks/gpu_check.sh' | head -n 1)")"; }

if [[ ${1:-} == -h || ${1:-} == --help ]]; then usage; exit 0; fi
if [[ ${1:-} == bake ]]; then bake; exit; fi

# The runs, in the order asked: "BAKE PHASE" lines.
DRY_RUN=()
RUNS=()
PHASES="tests|cuda|train|compile|bench"
for arg in "$@"; do
    case $arg in
    --dry-run) DRY_RUN=(--dry-run) ;;
    tests | cuda | train | compile | bench) RUNS+=("default $arg") ;;
    default:* | fp16:* | ddp:*)
        if [[ ! ${arg#*:} =~ ^($PHASES)$ ]]; then
            echo "error: unknown phase in '$arg' (BAKE:PHASE with PHASE ${PHASES//|/, })" >&2
            exit 2
        fi
        RUNS+=("${arg%%:*} ${arg#*:}") ;;
    *) echo "error: unknown argument '$arg' (bake, [BAKE:]PHASE with BAKE default, fp16 or ddp and PHASE ${PHASES//|/, })" >&2
        exit 2 ;;
    esac
done
if [[ -z ${RUNS[*]:-} ]]; then echo "error: name a phase, or bake (see --help)" >&2; exit 2; fi
for run in "${RUNS[@]}"; do
    if [[ ! -f $(project_of "${run%% *}" 2>/dev/null)/benchmarks/gpu_check.sh ]]; then
        echo "error: no bake '${run%% *}' in $BAKES_DIR: run 'bash scripts/gpu_check.sh bake' first (needs cookiecutter)" >&2
        exit 2
    fi
done

OUT=${OUT:-$PWD/gpu-check-out}
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/gpu-check-work}
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
rm -rf "$WORK/out" "$OUT/summary.txt" "$OUT/results.tsv" "$OUT/env.txt" "$OUT/logs.tgz"
mkdir -p "$WORK/out"
export GPU_CHECK_DEADLINE=${GPU_CHECK_DEADLINE:-$(($(date +%s) + ${GPU_CHECK_BUDGET_S:-480}))}

codes=()
unchecked=()
index=0
printf 'bake\tphase\tstep\tstatus\texit\tseconds\tfigure\n' >"$OUT/results.tsv"
for run in "${RUNS[@]}"; do
    read -r name phase <<<"$run"
    index=$((index + 1))
    sub=$WORK/out/$index-$name-$phase
    echo "=== bake $name: phase $phase"
    OUT=$sub GPU_CHECK_WORK=$WORK/work-$name bash "$(project_of "$name")/benchmarks/gpu_check.sh" "${DRY_RUN[@]}" \
        "$phase"
    code=$?
    codes+=("$code")
    if ((code == 3)); then unchecked+=("$name:$phase"); fi
    {
        echo "=== bake $name (${ANSWERS[$name]:-default answers}), phase $phase: exit $code"
        cat "$sub/summary.txt" 2>/dev/null || echo "no summary.txt"
        echo
    } >>"$OUT/summary.txt"
    awk -v bake="$name" 'NR > 1 { print bake "\t" $0 }' "$sub/results.tsv" >>"$OUT/results.tsv" 2>/dev/null
    if [[ ! -f $OUT/env.txt ]]; then cp "$sub/env.txt" "$OUT/env.txt" 2>/dev/null; fi
done
if ((${#unchecked[@]})); then
    echo "NOT FULLY CHECKED, out of time (exit 3): ${unchecked[*]}" >>"$OUT/summary.txt"
fi
tar -czf "$OUT/logs.tgz" -C "$WORK" out
echo
cat "$OUT/summary.txt"
# The worst outcome decides: a bad argument or no GPU (2), then a failure (1), then steps left unrun (3)
for worst in 2 1 3; do
    if [[ " ${codes[*]} " == *" $worst "* ]]; then exit "$worst"; fi
done
for code in "${codes[@]}"; do
    if ((code != 0)); then exit "$code"; fi
done
exit 0
