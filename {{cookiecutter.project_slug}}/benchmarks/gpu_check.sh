#!/usr/bin/env bash
# gpu_check.sh: the project's proof on a real CUDA GPU, offline, in one call that keeps its time budget.
#
#     bash benchmarks/gpu_check.sh [--dry-run] [--only STEP[,STEP...]] [--from STEP] [--fresh]
#     bash benchmarks/gpu_check.sh --list          # the steps, in the order they run, with their limits
#
# The steps run in a fixed order, the evidence that matters most first: the environment record, the CUDA test
# tier, training on cuda:0 (fp32; SIGTERM mid-epoch and --resume, bit-identical to an uninterrupted run;
# --device cuda:1 refused on one GPU; DDP with nccl under torchrun; bf16; fp16 with its GradScaler), one
# throughput figure (ResNet-50, 224 px, bf16, channels_last, from JPEG files with the default loader and device
# decode, beside the same model on batches already on the GPU), then --compile and the rest. The CPU-only test
# tiers (fake-CUDA, quick) are CI's, not this call's. --only runs the named steps and the step each needs (train-fp32
# for predict-cpu), --from a step and those after it; `env` runs in every call (the record the others are read against).
#
# Time: a step starts only when its limit fits in what is left of GPU_CHECK_BUDGET_S (default 330 s of work);
# otherwise it is recorded "skipped (time budget)", and the summary names the --only command that runs what
# was left. Every program the script starts (each python, nvidia-smi) runs inside a step, under its limit.
# A step whose feature this bake lacks (a flag train.py --help does not list, a missing script or module) is
# recorded "skipped (not in this bake)"; a step that needs CUDA is "skipped (no cuda)" in a dry run.
#
# Results in $OUT (default ./gpu-check-out), rewritten after every step, so a call cut short still returns
# what finished: summary.txt (per call: step, status, seconds, GPU memory high-water mark, the step's figure),
# results.tsv (the same, tab-separated, with the call number and exit code), env.txt (nvidia-smi, versions,
# /dev/shm, the locked-memory limit), logs.tgz (every step's log, the runs' metrics.csv). A second call with the
# same $OUT appends to these (call 2, 3, ...); --fresh deletes the earlier results and runs first.
# Exit 0 when every step of this call ran and passed (or was skipped as not applicable), 1 when one failed or
# timed out, 3 when none failed but the budget left steps unrun, 2 for a bad argument or no visible GPU.
# Nothing is installed, nothing needs the network.
#
# --dry-run (or GPU_CHECK_DRY_RUN=1): the same steps on the CPU with tiny sizes, under the same limits.
# Environment (optional): PYTHON (default python3, the one with torch), GPU_CHECK_WORK (bulky files; default
# ${TMPDIR:-/tmp}/gpu-check-work), GPU_CHECK_BUDGET_S (default 330), GPU_CHECK_TEST_TIMEOUT (seconds per CUDA
# test where pytest-timeout is installed; default 90), GPU_CHECK_WORKERS (loader workers of the pinned-memory
# run; default cores - 2), GPU_CHECK_PYTEST_ARGS (extra pytest arguments for the CUDA tier),
# GPU_CHECK_LIMIT_SCALE (every step's limit times this whole number, default 1: a dry run on a slow or busy CPU).

set -uo pipefail

PACKAGE={{ cookiecutter.package_name }}

# name, limit in seconds, the step whose success it needs, "cuda" when a dry run cannot run it, what it proves.
# The order is the order of evidence: a call that runs out of time has already brought back what matters most.
read -r -d '' STEP_TABLE <<'TABLE'
env                      45  -                 -     nvidia-smi; Python, torch, CUDA, cuDNN, NCCL; /dev/shm; ulimit -l
tests-cuda              150  -                 -     pytest -m cuda, each test under a per-test timeout
train-fp32               90  -                 -     train.py --device cuda:0 --precision fp32 on the demo data
resume-reference         90  -                 -     the uninterrupted run, deterministic algorithms
resume-sigterm-resume   120  resume-reference  -     SIGTERM mid-epoch with loader workers; --resume; last.pt compared
device-cuda1-refused     45  -                 -     --device cuda:1 on a one-GPU machine: exit 2 and one line
ddp-nccl                 90  -                 -     torchrun --nproc_per_node 1 train.py --parallel ddp: backend, world
train-bf16               90  -                 cuda  --precision bf16
train-fp16-gradscaler    90  -                 cuda  --precision fp16 (GradScaler), --clip-grad, --accum-steps
throughput-resnet50     120  -                 -     resnet50 bf16 NHWC 224 px: JPEG loader vs batches on the device
train-compile           240  -                 cuda  --compile, bf16, channels_last, one epoch (one graph each split)
devkit-auto-free         45  -                 -     python -m PACKAGE.devkit auto:free: device table and pick
predict-cpu              60  train-fp32        -     the GPU run's best.pt in predict.py --device cpu, no GPU visible
evaluate-device          60  train-fp32        -     evaluate.py on the device with loader workers
predict-device-half      60  train-fp32        cuda  predict.py --half on the device
export-pt2-predict      120  train-fp32        -     export.py --format pt2 (its parity check), predict.py from the .pt2
train-mixup-cutmix       90  -                 cuda  --augment standard --mixup --cutmix on the device, bf16
train-channels-last      90  -                 cuda  --channels-last, fp32
train-device-decode     120  -                 cuda  --decode device on the demo data as JPEG files
train-cache-images       90  -                 cuda  --cache-images
train-workers-pinned    120  -                 cuda  one epoch, 224 px, batch 240, cores - 2 workers, pinned batches
loop-fp32               120  -                 -     loop_overhead.py fp32: the project's loop vs a hand-written one
loop-bf16               120  -                 cuda  loop_overhead.py bf16
loop-fp16               120  -                 cuda  loop_overhead.py fp16
loop-bf16-channels-last 120  -                 cuda  loop_overhead.py bf16 --channels-last
loop-bf16-compile       240  -                 cuda  loop_overhead.py bf16 --compile
TABLE

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
refuse() { echo "error: $1 (bash benchmarks/gpu_check.sh ${2:---help})" >&2; exit 2; } # refuse WHAT [HINT]

SCALE=${GPU_CHECK_LIMIT_SCALE:-1}
[[ $SCALE =~ ^[1-9][0-9]*$ ]] || refuse "GPU_CHECK_LIMIT_SCALE must be a whole number, 1 or more"
declare -a ORDER=()
declare -A LIMIT=() NEEDS=() CUDA_ONLY=()
while read -r name limit needs cuda _; do
    ORDER+=("$name")
    LIMIT[$name]=$((limit * SCALE)) NEEDS[$name]=$needs CUDA_ONLY[$name]=$cuda
done <<<"$STEP_TABLE"

# --- arguments: all checked before anything is written ---------------------------------------------------------
DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
FRESH=0 FROM="" ONLY=()
while (($#)); do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --list) printf '%-21s %5s  %-17s %-5s %s\n' step limit needs cuda what
        while read -r name limit rest; do printf '%-21s %5s  %s\n' "$name" "${LIMIT[$name]}" "$rest"; done \
            <<<"${STEP_TABLE//PACKAGE/$PACKAGE}"
        exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    --fresh) FRESH=1 ;;
    --only | --from) [[ $# -ge 2 && $2 != -* ]] || refuse "$1 needs a step name"
        if [[ $1 == --only ]]; then IFS=, read -r -a names <<<"$2"; ONLY+=("${names[@]}"); else FROM=$2; fi
        shift ;;
    --only=*) IFS=, read -r -a names <<<"${1#--only=}"; ONLY+=("${names[@]}") ;;
    --from=*) FROM=${1#--from=} ;;
    *) refuse "unknown argument '$1'" ;;
    esac
    shift
done
for name in ${FROM:+"$FROM"} "${ONLY[@]}"; do
    [[ -n ${LIMIT[$name]:-} ]] || refuse "unknown step '$name'" "--list names them"
done
[[ ${GPU_CHECK_BUDGET_S:-330} =~ ^[0-9]+$ ]] || refuse "GPU_CHECK_BUDGET_S must be whole seconds"

# --only brings each named step's prerequisite along: a second call on a fresh machine has no work folder (the
# first run's best.pt) to lean on, and a prerequisite that ran in an earlier call may be gone with that machine
for name in ${ONLY[@]+"${ONLY[@]}"}; do
    [[ ${NEEDS[$name]} == - || " ${ONLY[*]} " == *" ${NEEDS[$name]} "* ]] || ONLY+=("${NEEDS[$name]}")
done
SELECTED=(env) # the record every other result is read against, in every call
started=${FROM:-${ORDER[0]}}
for name in "${ORDER[@]}"; do
    [[ $name == "$started" ]] && started=yes
    [[ $started == yes && $name != env ]] || continue
    if [[ -z ${ONLY[*]:-} || " ${ONLY[*]} " == *" $name "* ]]; then SELECTED+=("$name"); fi
done

# --- where things go ---------------------------------------------------------------------------------------------
PROJECT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/gpu-check-work}
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
RESULTS=$OUT/results.tsv SUMMARY=$OUT/summary.txt
HEADER=$'call\tstep\tstatus\texit\tseconds\tgpu_mib\tfigure'
PACK=$WORK/pack RUNS=$WORK/runs FIGURES=$WORK/figures HELP=$WORK/help
# A second call in the same command appends (the GPU machine empties $OUT before each command, not between
# calls); results of another layout, or --fresh, are deleted first.
if ((FRESH)) || [[ ! -f $RESULTS || $(head -n 1 "$RESULTS") != "$HEADER" ]]; then
    rm -rf "$PACK" "$RUNS" "$RESULTS" "$SUMMARY" "$OUT/env.txt" "$OUT/logs.tgz"
    printf '%s\n' "$HEADER" >"$RESULTS"
    EARLIER=""
else
    EARLIER=$(cat "$SUMMARY" 2>/dev/null)$'\n\n'
    rm -rf "$PACK"
    mkdir -p "$PACK"
    tar -xzf "$OUT/logs.tgz" -C "$PACK" 2>/dev/null
fi
CALL=$(($(awk -F'\t' 'NR > 1 && $1 > n { n = $1 } END { print n + 0 }' "$RESULTS") + 1))
LOGS=$PACK/logs/call-$CALL
rm -rf "$LOGS" "$FIGURES" "$HELP"
mkdir -p "$LOGS" "$RUNS" "$FIGURES" "$HELP"
touch "$FIGURES/.start" # what this call's runs wrote is newer
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-330}
DEADLINE=$((T0 + BUDGET))

cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 4; } # nproc obeys OMP_NUM_THREADS

# Sizes: a real run on the GPU, or the smallest that still takes every path on the CPU.
CORES=$(cores)
if ((DRY_RUN)); then
    DEVICE=cpu EPOCHS=1 WORKERS=1 # workers: evaluate.py and predict.py's, so the dry run starts one
    DATA=$WORK/tiny-demo VAL_DIR=$WORK/tiny-demo/val # 16 training and 8 validation images a class
    TRAIN_SIZE=(--data "$DATA" --image-size 32 --batch-size 8 --workers 0)
    RESUME_WORKERS=(--workers 1) # SIGTERM reaches a run whose loader has a worker, as on the GPU
    COMPILE_SIZE=(--batch-size 16)
    PINNED_SIZE=()
    LOOP_SIZE=(--image-size 32 --batch-size 4 --batches 2 --warmup 0 --repeats 1)
    THROUGHPUT_SIZE=(--image-size 32 --batch-size 4 --images 8 --repeats 1 --warmup 0)
else
    DEVICE=cuda:0 EPOCHS=2
    DATA="" VAL_DIR=data/demo/val # train.py writes the demo data on its first run
    TRAIN_SIZE=()
    RESUME_WORKERS=() # train.py's default: the cores less one
    WORKERS=${GPU_CHECK_WORKERS:-$((CORES > 3 ? CORES - 2 : 1))}
    # The demo data's 960 training and 240 validation images: 48 divides both, so no batch is smaller
    COMPILE_SIZE=(--batch-size 48)
    PINNED_SIZE=(--image-size 224 --batch-size 240 --workers "$WORKERS") # 36 MiB of pinned uint8 per batch
    LOOP_SIZE=(--image-size 224 --batch-size 128 --batches 20 --warmup 2 --repeats 5)
    # 12 batches of 256 a pass; the loader's workers are train.py's default count
    THROUGHPUT_SIZE=(--image-size 224 --batch-size 256 --images 3072 --repeats 3 --warmup 1)
fi
PAUSE_AT=step:$EPOCHS:5 # SIGTERM arrives after this optimizer step: mid-epoch, as a scheduler's would
PAUSE_VAR=TEST_PAUSE_AT # tests/paused_train.py's variable
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT:-90}
COMMAND=${GPU_CHECK_COMMAND:-bash benchmarks/gpu_check.sh} # how the summary says to run what was left

export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TORCH_HOME=$WORK/torch-home COLUMNS=400
# The environment must not pick the device, nor pause a run, behind the flags' back.
unset "${PACKAGE^^}_DEVICE" "$PAUSE_VAR"
cd "$PROJECT" || exit 2

# --- the record ----------------------------------------------------------------------------------------------------
answers() { # the bake's answers that change what is checked (cookiecutter writes them beside the project)
    grep -ho '"\(multi_gpu\|default_precision\|default_device\)": *"[^"]*"' .cookiecutter.json 2>/dev/null |
        tr -d '" ' | sed 's/:/=/' | paste -sd ' ' -
}

record() { # record STEP STATUS EXIT SECONDS GPU_MIB FIGURE: one row of results.tsv, then the summary again
    local figure=${6//$'\t'/ }
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$CALL" "$1" "$2" "$3" "$4" "$5" "${figure//$'\n'/ }" >>"$RESULTS"
    printf '%-24s %-28s %5ss %8s  %s\n' "$1" "$2" "$4" "$5" "$6"
    write_summary "in progress"
}

skip() { record "$1" "skipped ($2)" - 0 - ""; } # skip STEP WHY

latest_status() { awk -F'\t' -v step="$1" 'NR > 1 && $2 == step { status = $3 } END { print status }' "$RESULTS"; }

this_call() { awk -F'\t' -v call="$CALL" 'NR > 1 && $1 == call' "$RESULTS"; }

write_summary() { # write_summary STATE: the earlier calls' summaries, then this call's table
    local unrun failed
    failed=$(this_call | awk -F'\t' '$3 == "FAIL" || $3 ~ /^timeout/' | wc -l)
    unrun=$(this_call | awk -F'\t' '$3 == "skipped (time budget)" { print $2 }' | paste -sd , -)
    {
        printf '%s' "$EARLIER"
        echo "=== gpu_check.sh call $CALL: ${ARGS:-all steps}$( ((DRY_RUN)) && echo ' (dry run on the CPU)')"
        echo "project: $PROJECT ($(answers)); $1; $(($(date +%s) - T0)) s of a $BUDGET s budget"
        echo "machine: $(grep -m 1 '^cuda:0 ' "$OUT/env.txt" 2>/dev/null || echo 'no CUDA device recorded')"
        printf '%-24s %-28s %6s %8s  %s\n' step status seconds gpu_mib figure
        this_call | awk -F'\t' '{ printf "%-24s %-28s %6s %8s  %s\n", $2, $3, $5, $6, $7 }'
        echo "$failed step(s) failed or timed out; logs in logs.tgz (logs/call-$CALL)"
        if [[ -n $unrun ]]; then
            echo "NOT CHECKED, out of time: ${unrun//,/ }"
            echo "run them next: $COMMAND$( ((DRY_RUN)) && echo ' --dry-run') --only $unrun"
        fi
    } >"$SUMMARY.tmp" && mv "$SUMMARY.tmp" "$SUMMARY"
}

pack() { # every log of every call in this $OUT, and the small files of this call's runs, in logs.tgz
    find "$RUNS" -maxdepth 2 -newer "$FIGURES/.start" \( -name metrics.csv -o -name config.json -o -name '*.log' \) \
        -exec sh -c 'for f; do cp "$f" "$0/run-$(basename "$(dirname "$f")")-$(basename "$f")"; done' "$LOGS" {} +
    cp "$RESULTS" "$LOGS/"
    tar -czf "$OUT/logs.tgz.tmp" -C "$PACK" logs && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
}

# --- the step machinery ----------------------------------------------------------------------------------------
# What a step's child bash gets: these variables and this file's functions, as definitions (nothing exported,
# so no function or variable of this script leaks into the tests' own processes).
SHARED_VARS="PROJECT PACKAGE PYTHON DEVICE EPOCHS DRY_RUN RUNS LOGS FIGURES HELP OUT CALL ARGS PAUSE_AT PAUSE_VAR STEP
    DATA VAL_DIR TRAIN_SIZE RESUME_WORKERS LOOP_SIZE THROUGHPUT_SIZE COMPILE_SIZE PINNED_SIZE WORKERS TEST_TIMEOUT
    DETERMINISTIC DDP_WRAP ENV_PY COMPARE PREDICTIONS TINY_DEMO JPEG_DEMO"

memory_sampler() { # GPU memory in use every 0.2 s while a step runs (a dry run has no GPU to watch)
    ((DRY_RUN)) || ! command -v nvidia-smi >/dev/null && return
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$WORK/memory.csv" 2>/dev/null &
    SAMPLER=$!
}

memory_high_water() { # the highest sample in MiB (of any GPU); "-" without samples
    [[ -n ${SAMPLER:-} ]] || { echo -; return; }
    kill "$SAMPLER" 2>/dev/null
    wait "$SAMPLER" 2>/dev/null
    SAMPLER=""
    awk '/^[0-9]+$/ { if ($1 > top) top = $1; seen = 1 } END { print seen ? top : "-" }' "$WORK/memory.csv"
}

run_step() { # run_step NAME: its function under `timeout`, if its limit fits in what is left; one row recorded
    local name=$1 limit=${LIMIT[$1]} needs=${NEEDS[$1]} start rc status mib left definitions
    if ((DRY_RUN)) && [[ ${CUDA_ONLY[$name]} == cuda ]]; then skip "$name" "no cuda"; return; fi
    if [[ $needs != - ]]; then
        case $(latest_status "$needs") in
        ok) ;;
        # cut by the budget itself: so is this one, and the rerun names both
        "skipped (time budget)") skip "$name" "time budget"; return ;;
        *) skip "$name" "needs $needs"; return ;;
        esac
    fi
    left=$((DEADLINE - $(date +%s)))
    # Never shortened to fit: a step cut by the budget is not started, so it is never mistaken for a timeout
    if ((limit > left)); then skip "$name" "time budget"; return; fi
    STEP=$name
    # shellcheck disable=SC2086
    definitions="$(declare -p $SHARED_VARS; declare -f)"
    memory_sampler
    start=$(date +%s)
    # In the background, so that a signal to this script is handled at once (a foreground child is waited out)
    timeout -k 5 "$limit" bash -c "$definitions"$'\n''"$@"' "$name" "do_${name//-/_}" >"$LOGS/$name.log" 2>&1 \
        </dev/null &
    RUNNING=$!
    wait "$RUNNING"
    rc=$?
    RUNNING=""
    mib=$(memory_high_water)
    case $rc in
    0) status=ok ;;
    124 | 137) status="timeout (${limit}s)" ;;
    *) status=FAIL ;;
    esac
    if [[ $rc == 0 && -f $FIGURES/$name.skip ]]; then status="skipped ($(cat "$FIGURES/$name.skip"))"; fi
    record "$name" "$status" "$rc" $(($(date +%s) - start)) "$mib" "$(cat "$FIGURES/$name" 2>/dev/null)"
    pack
}

# --- helpers the steps call (in their child bash, under the step's timeout) -----------------------------------------
figure() { printf '%s' "$*" >"$FIGURES/$STEP"; } # the step's key figure for the summary

not_applicable() { # not_applicable WHY: end this step as "skipped (WHY)"
    printf '%s' "$1" >"$FIGURES/$STEP.skip"
    echo "skipped: $1"
    exit 0
}

help_of() { # help_of SCRIPT: its --help text, asked once a call; a script this bake lacks ends the step
    local cached=$HELP/${1//\//_}.txt
    [[ -f $1 ]] || not_applicable "not in this bake: no $1"
    if [[ ! -f $cached ]]; then
        "$PYTHON" "$1" --help >"$cached.tmp" 2>&1 || { cat "$cached.tmp"; echo "$1 --help failed"; exit 1; }
        mv "$cached.tmp" "$cached"
    fi
    cat "$cached"
}

has_flag() { help_of "$1" | grep -qE -- "(^|[[ ,|])$2([] =,|]|$)"; } # has_flag SCRIPT FLAG
has_choice() { help_of "$1" | grep -qE -- "$2 \{([a-z0-9_-]+,)*$3[,}]"; } # has_choice SCRIPT FLAG VALUE

require_flags() { # require_flags SCRIPT ARGS...: every --flag in ARGS is SCRIPT's, else "not in this bake"
    local script=$1 arg
    help_of "$script" >/dev/null
    for arg in "${@:2}"; do
        [[ $arg == --[a-z]* ]] || continue
        has_flag "$script" "${arg%%=*}" || not_applicable "not in this bake: $script has no ${arg%%=*}"
    done
}

require_module() { # require_module MODULE: importable, else "not in this bake"
    "$PYTHON" -c 'import importlib.util, sys
try:
    sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)
except ModuleNotFoundError:
    sys.exit(3)' "$1"
    case $? in
    0) ;;
    3) not_applicable "not in this bake: no module $1" ;;
    *) exit 1 ;;
    esac
}

TINY_DEMO='import sys, pathlib
from '"$PACKAGE"'.data import write_demo_dataset
write_demo_dataset(pathlib.Path(sys.argv[1]), train_per_class=16, val_per_class=8)'

ensure_data() { # the dry run's small copy of the demo data, written by the first step that needs it
    [[ -z $DATA || -d $DATA/val ]] && return
    "$PYTHON" -c "$TINY_DEMO" "$DATA.tmp" && mv "$DATA.tmp" "$DATA"
}

parallel_none() { # --parallel none where train.py has the flag (a ddp bake's default is ddp)
    if has_flag train.py --parallel; then echo "--parallel none"; fi
}

metrics_figure() { # metrics_figure RUN_DIR: the last epoch's images/s and val_acc from metrics.csv
    [[ -f $1/metrics.csv ]] || { echo "no metrics.csv"; return; }
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { ips = $col["images_per_s"]; acc = $col["val_acc"]; n++ }
        END { if (n) printf "%s img/s (last epoch), val_acc %s, %d epochs", ips, acc, n; else print "no metrics.csv rows" }' \
        "$1/metrics.csv"
}

train() { # train RUN ARGS...: train.py on the demo data, from scratch, in RUNS/RUN
    local run=$1 args
    help_of train.py >/dev/null
    args=(--device "$DEVICE" --epochs "$EPOCHS" --no-pretrained --seed 0 $(parallel_none) "${TRAIN_SIZE[@]}"
        "${@:2}")
    require_flags train.py "${args[@]}"
    ensure_data || return 1
    rm -rf "${RUNS:?}/$run"
    "$PYTHON" train.py "${args[@]}" --out "$RUNS/$run"
}

train_run() { # train_run RUN ARGS...: one training run; figure: its images/s and accuracy
    train "$@"
    local rc=$?
    figure "$(metrics_figure "$RUNS/$1")"
    return "$rc"
}

# The two runs compared bit for bit use deterministic algorithms (cuDNN autotuning then stays off, see
# training/hardware.py); train.py has no flag for it, so a few lines set it and call train.main, with the
# tests' pause points (tests/paused_train.py: they pause only where $PAUSE_VAR names a point).
DETERMINISTIC='import os, sys, torch
torch.use_deterministic_algorithms(True, warn_only=True)
sys.path[:0] = [".", "tests"]
import train
from paused_train import PausePoints, pausing_replace
os.replace = pausing_replace(os.replace)
sys.exit(train.main(sys.argv[1:], plugins=[PausePoints()]))'

deterministic_train() { # deterministic_train RUN ARGS...: becomes that python process (call it in a subshell)
    CUBLAS_WORKSPACE_CONFIG=:4096:8 exec "$PYTHON" -c "$DETERMINISTIC" --device "$DEVICE" --epochs "$EPOCHS" \
        --no-pretrained $(parallel_none) --seed 0 --precision fp32 "${TRAIN_SIZE[@]}" "${RESUME_WORKERS[@]}" \
        --out "$RUNS/$1" "${@:2}"
}

COMPARE='import sys, torch
sys.path.insert(0, "tests")
from conftest import nested_tensors  # the walk the resume tests compare checkpoints with
resumed, reference = (torch.load(path, map_location="cpu", weights_only=True) for path in sys.argv[1:3])
mine, theirs = (dict(nested_tensors(state["model"], "model")) | dict(nested_tensors(state["optimizer"], "optimizer"))
                for state in (resumed, reference))
if mine.keys() != theirs.keys():
    print("different tensor names")
    sys.exit()
differ = [key for key in theirs if not torch.equal(mine[key], theirs[key])]
if not differ and resumed["epoch"] == reference["epoch"]:
    print(f"bit-identical to the uninterrupted run ({len(theirs)} model and optimizer tensors)")
else:
    worst = max((float((mine[k].double() - theirs[k].double()).abs().max()) for k in differ), default=0.0)
    epochs = (resumed["epoch"], reference["epoch"])
    print(f"{len(differ)} of {len(theirs)} tensors differ, max abs diff {worst:.3g}, first {differ[:1]}; "
          f"epochs {epochs}")'

PREDICTIONS='import json, pathlib, sys
rows = json.loads(pathlib.Path(sys.argv[1]).read_text())
right = sum(pathlib.Path(row["path"]).parent.name == row["label"] for row in rows)
print(f"{len(rows)} predictions on the CPU, {right} match their folder")'

predict_device() { # predict_device CHECKPOINT ARGS...: predict.py on the device over the demo's val images
    require_flags predict.py --device --workers --json "${@:2}"
    "$PYTHON" predict.py "$1" "$VAL_DIR" --device "$DEVICE" --workers "$WORKERS" --json "${@:2}" \
        >"$LOGS/$STEP.json" || return 1
    figure "$("$PYTHON" -c "$PREDICTIONS" "$LOGS/$STEP.json" | sed "s/on the CPU/on $DEVICE${2:+ $2}/")"
}

loop_overhead() { # loop_overhead ARGS...: figure: the median ratio project / hand-written and the rates
    require_flags benchmarks/loop_overhead.py --device "$@"
    "$PYTHON" benchmarks/loop_overhead.py --device "$DEVICE" "${LOOP_SIZE[@]}" "$@"
    local rc=$?
    figure "ratio $(grep -m 1 '^median ratio project / ' "$LOGS/$STEP.log" | sed 's/.*: //') (goal >= 0.97); $(
        grep -m 1 '^median images/s' "$LOGS/$STEP.log" | sed 's/median images.s: //')"
    return "$rc"
}

# --- the steps, in the table's order --------------------------------------------------------------------------
ENV_PY='import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda build", torch.version.cuda)
for name in ("torchvision", "numpy", "pillow", "pytest", "pytest-timeout", "pytest-xdist", "scikit-image",
             "tensorboard", "onnx", "onnxruntime", "matplotlib", "tqdm", "timm", "safetensors"):
    try:
        print(f"  {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"  {name} -")
print("cuda available:", torch.cuda.is_available(), "devices:", torch.cuda.device_count())
for index in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(index)
    print(f"cuda:{index} {p.name} cc {p.major}.{p.minor} {p.total_memory / 2**30:.1f} GiB {p.multi_processor_count} SMs")
if torch.cuda.is_available():
    print("bf16:", torch.cuda.is_bf16_supported(), "cudnn:", torch.backends.cudnn.version(),
          "nccl:", torch.cuda.nccl.version())'

do_env() { # env.txt: this call's section; fails without a usable CUDA device (unless a dry run)
    local text
    text=$({
        echo "=== call $CALL: gpu_check.sh ${ARGS:-all steps} $(date -u +%FT%TZ) dry run: $DRY_RUN"
        echo "host: $(uname -srm) cores: $(env -u OMP_NUM_THREADS nproc) project: $PROJECT ($(answers))"
        # Loader workers hand batches over in /dev/shm, and pinned batches count against the locked-memory limit
        echo "memory: $(awk '/^MemTotal:/ { t = $2 } /^MemAvailable:/ { a = $2 } END {
            printf "%.1f GiB, %.1f GiB available", t / 2^20, a / 2^20 }' /proc/meminfo 2>/dev/null)"
        echo "/dev/shm: $(df -h /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 " size, " $4 " free" }')"
        echo "locked-memory limit (ulimit -l): $(ulimit -l)"
        echo "--- nvidia-smi"
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi 2>&1
            nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,mig.mode.current --format=csv 2>&1
        else
            echo "nvidia-smi: not found"
        fi
        echo "--- $PYTHON"
        "$PYTHON" -c "$ENV_PY" 2>&1
        echo "--- the project's defaults"
        "$PYTHON" -c "from $PACKAGE.config import DEFAULT_DEVICE, TrainConfig as C
print('device', DEFAULT_DEVICE, 'precision', C().precision, 'parallel', C().parallel, 'backbone', C().backbone)" 2>&1
    })
    printf '%s\n\n' "$text" >>"$OUT/env.txt"
    echo "$text"
    local gpu versions
    gpu=$(grep -m 1 '^cuda:0 ' <<<"$text")
    versions=$(grep -m 1 '^python ' <<<"$text" | awk '{ print "torch " $4 ", CUDA " $7 ", python " $2 }')
    figure "${gpu:-no CUDA device}; ${versions:-no torch}"
    ((DRY_RUN)) || [[ -n $gpu ]]
}

do_tests_cuda() { # the CUDA tier; each test under pytest-timeout's limit where it is installed
    local per_test=() extra=() note
    if "$PYTHON" -c 'import pytest_timeout' 2>/dev/null; then
        per_test=(--timeout "$TEST_TIMEOUT") note="per-test timeout ${TEST_TIMEOUT}s"
    else
        note="no per-test timeout: pytest-timeout is not installed"
    fi
    read -r -a extra <<<"${GPU_CHECK_PYTEST_ARGS:-}"
    "$PYTHON" -m pytest -q -rfE -p no:cacheprovider --basetemp="$RUNS/pytest-$STEP" -m cuda "${per_test[@]}" \
        "${extra[@]}"
    local rc=$?
    figure "$(grep -E '^[0-9]+ (passed|failed|skipped|error|deselected)|no tests ran' "$LOGS/$STEP.log" |
        tail -n 1 | sed -E 's/ in [0-9.]+s.*//'); $note"
    return "$rc"
}

do_train_fp32() { train_run fp32 --precision fp32; }

do_resume_reference() { # the uninterrupted run
    require_flags train.py --resume "${RESUME_WORKERS[@]}"
    ensure_data || return 1
    rm -rf "${RUNS:?}/reference"
    (deterministic_train reference)
    local rc=$?
    figure "$(metrics_figure "$RUNS/reference")"
    return "$rc"
}

do_resume_sigterm_resume() { # SIGTERM after step PAUSE_AT (exit 143), --resume, then last.pt against the reference's
    local log=$LOGS/$STEP.interrupted.log pid rc waited=0
    help_of train.py >/dev/null
    rm -rf "${RUNS:?}/interrupted"
    (export "$PAUSE_VAR=$PAUSE_AT"; deterministic_train interrupted) >"$log" 2>&1 &
    pid=$! # the python process itself: the subshell became it
    until grep -q "paused at $PAUSE_AT" "$log"; do
        if ! kill -0 "$pid" 2>/dev/null || ((waited > 3000)); then
            echo "train.py never reached $PAUSE_AT:"; cat "$log"; figure "never paused at $PAUSE_AT"; return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    cat "$log"
    echo "### interrupted run: exit $rc (want 143); now --resume"
    if ((rc != 143)); then figure "SIGTERM exit $rc, not 143"; return 1; fi
    (deterministic_train interrupted --resume "$RUNS/interrupted") || { figure "--resume failed"; return 1; }
    figure "SIGTERM at $PAUSE_AT: exit 143; resumed: $("$PYTHON" -c "$COMPARE" "$RUNS/interrupted/last.pt" \
        "$RUNS/reference/last.pt" 2>&1 | tail -n 1)"
    [[ $(cat "$FIGURES/$STEP") == *bit-identical* ]]
}

do_device_cuda1_refused() { # --device cuda:1 on a one-GPU (or no-GPU) machine: exit 2 and exactly one line
    local count text rc lines
    # env, the call's first step, counted them; a python of its own where the budget left env out
    if [[ -f $LOGS/env.log ]]; then count=$(grep -c '^cuda:[0-9]* ' "$LOGS/env.log")
    else count=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())') || return 1; fi
    if ((count > 1)); then not_applicable "$count GPUs: cuda:1 exists"; fi
    help_of train.py >/dev/null
    text=$("$PYTHON" train.py --device cuda:1 --epochs 1 --no-pretrained $(parallel_none) --out "$RUNS/cuda1" 2>&1)
    rc=$?
    lines=$(grep -c . <<<"$text")
    echo "$text"
    figure "exit $rc, $lines line(s): $(head -n 1 <<<"$text")"
    ((rc == 2 && lines == 1))
}

# torch's own word on the process group train.py joined: its backend and world size, printed as it is made
DDP_WRAP='import runpy, sys
import torch.distributed as dist
joined = dist.init_process_group
def join_and_say(*args, **kwargs):
    joined(*args, **kwargs)
    print(f"gpu_check: process group {dist.get_backend()}, world size {dist.get_world_size()}", flush=True)
dist.init_process_group = join_and_say
sys.path.insert(0, ".")
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")'

do_ddp_nccl() { # one rank of DistributedDataParallel under torchrun: nccl on the GPU (gloo in a dry run)
    local device=auto want=nccl group
    ((DRY_RUN)) && device=cpu want=gloo
    help_of train.py >/dev/null
    help_of train.py | grep -qE -- '--parallel \{[^}]*\bddp\b' ||
        not_applicable "not in this bake: train.py has no --parallel ddp (bake with multi_gpu=ddp)"
    ensure_data || return 1
    rm -rf "${RUNS:?}/ddp"
    NCCL_DEBUG=VERSION "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 1 --no-python "$PYTHON" \
        -c "$DDP_WRAP" --parallel ddp --device "$device" --epochs "$EPOCHS" --no-pretrained --seed 0 \
        --out "$RUNS/ddp" "${TRAIN_SIZE[@]}"
    local rc=$?
    group=$(grep -m 1 -o 'process group .*' "$LOGS/$STEP.log" | sed 's/process group //')
    figure "${group:-no process group seen}$(grep -m 1 -o 'NCCL version [^ ]*' "$LOGS/$STEP.log" | sed 's/^/; /');\
 $(metrics_figure "$RUNS/ddp")"
    ((rc == 0)) && [[ $group == "$want, world size 1" ]]
}

do_train_bf16() { train_run bf16 --precision bf16; }

do_train_fp16_gradscaler() { # fp16 trains through a GradScaler; clipping needs its unscale first
    train_run fp16 --precision fp16 --clip-grad 1.0 --accum-steps 2
}

do_throughput_resnet50() { # the whole pipeline from JPEG files beside the same batches already on the device
    local args=(--device "$DEVICE" --backbone resnet50 --precision bf16 --channels-last "${THROUGHPUT_SIZE[@]}")
    ((DRY_RUN)) || ! has_choice train.py --decode device || args+=(--decode device) # the gpu_decode answer's
    require_flags benchmarks/pipeline_vs_memory.py "${args[@]}"
    "$PYTHON" benchmarks/pipeline_vs_memory.py "${args[@]}"
    local rc=$? log=$LOGS/$STEP.log
    figure "$(awk '/^ *pipeline:/ { p = $NF } /^in memory:/ { m = $NF }
        END { printf "JPEG pipeline %s img/s, on-device batches %s img/s", p, m }' "$log"); ratio $(
        grep -m 1 '^median ratio pipeline' "$log" | sed 's/.*: //; s/ (.*//') (goal >= 0.9); $(
        grep -m 1 -o 'decode on the [a-z]*' "$log"), $(grep -m 1 -o 'workers [0-9]*' "$log")"
    return "$rc"
}

do_train_compile() { train_run compile --precision bf16 --channels-last --compile --epochs 1 "${COMPILE_SIZE[@]}"; }

do_devkit_auto_free() { # the device table, and what auto:free picks
    require_module "$PACKAGE.devkit"
    "$PYTHON" -m "$PACKAGE.devkit" auto:free
    local rc=$?
    figure "$(grep -m 1 -E '^auto:free' "$LOGS/$STEP.log"); table: $(grep -m 1 -E '^cuda:0 |^cpu ' "$LOGS/$STEP.log" |
        tr -s ' ')"
    return "$rc"
}

do_predict_cpu() { # the GPU run's best.pt in predict.py --device cpu, with no GPU visible
    require_flags predict.py --device --json
    CUDA_VISIBLE_DEVICES="" "$PYTHON" predict.py "$RUNS/fp32/best.pt" "$VAL_DIR" --device cpu --json \
        >"$LOGS/$STEP.json" || return 1
    figure "$("$PYTHON" -c "$PREDICTIONS" "$LOGS/$STEP.json")"
}

do_evaluate_device() { # the fp32 run's best.pt measured by evaluate.py on the device, with loader workers
    require_flags evaluate.py --device --workers --out
    "$PYTHON" evaluate.py "$RUNS/fp32/best.pt" --device "$DEVICE" --workers "$WORKERS" --out "$RUNS/evaluate"
    local rc=$?
    figure "$(grep -m 1 -iE 'accuracy' "$LOGS/$STEP.log" | tr -s ' ')"
    return "$rc"
}

do_predict_device_half() { predict_device "$RUNS/fp32/best.pt" --half; }

do_export_pt2_predict() { # export.py --format pt2 (its own parity check), then predict.py runs the .pt2 on the device
    require_flags export.py --format --out
    help_of export.py | grep -q pt2 || not_applicable "not in this bake: export.py has no pt2 format"
    "$PYTHON" export.py "$RUNS/fp32/best.pt" --format pt2 --out "$RUNS/fp32/model.pt2" || return 1
    predict_device "$RUNS/fp32/model.pt2"
}

do_train_mixup_cutmix() { train_run mixup-cutmix --precision bf16 --augment standard --mixup 0.2 --cutmix 1.0; }

do_train_channels_last() { train_run channels-last --precision fp32 --channels-last; }

JPEG_DEMO='import sys
from pathlib import Path
from PIL import Image
from '"$PACKAGE"'.data import write_demo_dataset
root = Path(sys.argv[1])
pngs = write_demo_dataset(root / "png", train_per_class=60, val_per_class=20)
for png in pngs.rglob("*.png"):
    jpeg = root / "jpeg" / png.relative_to(pngs).with_suffix(".jpg")
    jpeg.parent.mkdir(parents=True, exist_ok=True)
    Image.open(png).convert("RGB").save(jpeg, quality=90)'

do_train_device_decode() { # on JPEGs: the demo's PNGs would all be decoded in the workers (the path for other formats)
    has_choice train.py --decode device ||
        not_applicable "not in this bake: train.py has no --decode device (bake with gpu_decode=yes)"
    if [[ ! -d $RUNS/demo-jpeg/jpeg ]]; then
        rm -rf "${RUNS:?}/demo-jpeg"
        "$PYTHON" -c "$JPEG_DEMO" "$RUNS/demo-jpeg" || return 1
    fi
    train_run device-decode --precision bf16 --decode device --data "$RUNS/demo-jpeg/jpeg"
}

do_train_cache_images() { train_run cache-images --precision fp32 --cache-images; }

do_train_workers_pinned() { train_run workers-pinned --precision bf16 --epochs 1 "${PINNED_SIZE[@]}"; }

do_loop_fp32() { loop_overhead --precision fp32; }
do_loop_bf16() { loop_overhead --precision bf16; }
do_loop_fp16() { loop_overhead --precision fp16; }
do_loop_bf16_channels_last() { loop_overhead --channels-last --precision bf16; }
do_loop_bf16_compile() { loop_overhead --compile --precision bf16; }

# --- the call ----------------------------------------------------------------------------------------------------
finish() { # the summary's last word and this call's exit status
    local failed unrun
    failed=$(this_call | awk -F'\t' '$3 == "FAIL" || $3 ~ /^timeout/' | wc -l)
    unrun=$(this_call | awk -F'\t' '$3 == "skipped (time budget)"' | wc -l)
    write_summary "$1"
    pack
    echo
    tail -n +$(($(printf '%s' "$EARLIER" | wc -l) + 1)) "$SUMMARY"
    # A step the budget left unrun proves nothing: its own exit status, never mistaken for a pass
    if ((failed)); then return 1; elif ((unrun)); then return 3; fi
}

ARGS=${FROM:+--from $FROM}
if [[ -n ${ONLY[*]:-} ]]; then ARGS="--only $(IFS=,; echo "${ONLY[*]}")${ARGS:+ $ARGS}"; fi
stopped() { # what finished stays in $OUT; the step that was running is recorded as stopped
    echo "gpu_check.sh: stopped by a signal"
    if [[ -n ${RUNNING:-} ]]; then
        kill -TERM "$RUNNING" 2>/dev/null # timeout passes it on to the step's processes
        wait "$RUNNING"
        record "$STEP" "stopped by a signal" - - "$(memory_high_water)" ""
    fi
    memory_high_water >/dev/null
    finish "stopped by a signal"
    exit 143
}
RUNNING=""
trap stopped TERM INT
echo "gpu_check.sh call $CALL: ${SELECTED[*]}; device $DEVICE; out $OUT; work $WORK; budget $BUDGET s"
for name in "${SELECTED[@]}"; do
    run_step "$name"
    if [[ $name == env && $(latest_status env) =~ ^(FAIL|timeout) ]] && ((!DRY_RUN)); then
        finish "stopped: no usable CUDA device"
        echo "error: $PYTHON sees no CUDA device (see $OUT/env.txt); --dry-run checks this script on the CPU" >&2
        exit 2
    fi
done
finish "done"
