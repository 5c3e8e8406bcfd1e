#!/usr/bin/env bash
# gpu_check.sh: the project's proof on a real CUDA GPU, offline, one phase or two per call of under 10 minutes.
#
#     bash benchmarks/gpu_check.sh [--dry-run] PHASE...
#
# PHASE: tests | cuda | train | compile | bench | all (every phase; longer than one call: split them).
#   tests    pytest -m cuda; -m fake_cuda; the rest of the quick tier (-m "not slow and not cuda and not
#            fake_cuda"), spread over pytest-xdist workers where xdist is installed
#   cuda     pytest -m cuda alone (another bake's CUDA tier beside a phase of the default bake)
#   train    train.py --device cuda:0 on the demo data: fp32, then SIGTERM mid-epoch and --resume against an
#            uninterrupted run (deterministic algorithms), --device cuda:1 refused on a one-GPU machine, DDP with
#            nccl under torchrun --nproc_per_node 1, the devkit table and auto:free, the GPU checkpoint in
#            predict.py --device cpu, evaluate.py and predict.py (--half, and a .pt2 export) on the GPU, then
#            bf16, fp16 with --clip-grad and --accum-steps, MixUp/CutMix, --channels-last, --cache-images, the
#            device-decode path where train.py has it, and loader workers with pinned batches at 224 px
#   compile  train.py --compile (bf16, channels_last), one epoch, batches that divide both splits (one graph each)
#   bench    loop_overhead.py fp32/bf16/fp16 (channels_last and compile where it has the flags), and
#            pipeline_vs_memory.py: resnet50, 224 px, batch 256, JPEGs written with PIL, N loader workers
# --dry-run (or GPU_CHECK_DRY_RUN=1): the same plumbing on the CPU with tiny sizes; steps that need CUDA are
#   recorded as "skipped (no cuda)". Without --dry-run and without a visible GPU: env.txt, then exit 2.
#
# Results in $OUT (default ./gpu-check-out), at most four files: summary.txt (step, status, seconds, key
# figure), results.tsv (the same, tab-separated, with phase and exit code), env.txt (nvidia-smi, versions,
# /dev/shm and the locked-memory limit), logs.tgz (every step's log, metrics.csv of the runs). Exit 0 when
# every step ran and passed, 1 when one failed or timed out, 3 when none failed but the time budget left some
# unrun (the summary names them), 2 for a bad argument or no GPU. Nothing is installed, nothing needs the network.
#
# Environment (optional): PYTHON (default python3, the one with torch), GPU_CHECK_WORK (bulky files;
# default ${TMPDIR:-/tmp}/gpu-check-work), GPU_CHECK_BUDGET_S (seconds this call may take, default 480: later
# steps are recorded as "skipped (time budget)"), GPU_CHECK_DEADLINE (an absolute `date +%s` that ends the
# budget sooner), GPU_CHECK_WORKERS (loader workers of the pinned-memory run and the pipeline benchmark;
# default: cores - 2), GPU_CHECK_XDIST (pytest-xdist workers for the quick tier; default: cores / 2, at most 8;
# 0 runs it in one process), GPU_CHECK_PYTEST_ARGS (extra pytest arguments for every tests step).

set -uo pipefail

PACKAGE={{ cookiecutter.package_name }}
PHASE_NAMES="tests cuda train compile bench"

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }

DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
PHASES=()
for arg in "$@"; do
    case $arg in
    -h | --help) usage; exit 0 ;;
    --dry-run) DRY_RUN=1 ;;
    all) PHASES+=(tests train compile bench) ;;
    tests | cuda | train | compile | bench) PHASES+=("$arg") ;;
    *) echo "error: unknown phase '$arg' (choose from: $PHASE_NAMES, all; or --dry-run, --help)" >&2; exit 2 ;;
    esac
done
if [[ -z ${PHASES[*]:-} ]]; then
    echo "error: name at least one phase ($PHASE_NAMES, all): each must fit in one call" >&2
    exit 2
fi

PROJECT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${GPU_CHECK_WORK:-${TMPDIR:-/tmp}/gpu-check-work}
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd)
WORK=$(cd "$WORK" && pwd)
LOGS=$WORK/logs RUNS=$WORK/runs FIGURES=$WORK/figures
rm -rf "$LOGS" "$RUNS" "$FIGURES" "$OUT/summary.txt" "$OUT/results.tsv" "$OUT/env.txt" "$OUT/logs.tgz"
mkdir -p "$LOGS" "$RUNS" "$FIGURES"
RESULTS=$OUT/results.tsv
printf 'phase\tstep\tstatus\texit\tseconds\tfigure\n' >"$RESULTS"
T0=$(date +%s)
DEADLINE=$((T0 + ${GPU_CHECK_BUDGET_S:-480}))
if [[ -n ${GPU_CHECK_DEADLINE:-} ]] && ((GPU_CHECK_DEADLINE < DEADLINE)); then DEADLINE=$GPU_CHECK_DEADLINE; fi
PHASE=setup

gpu_count() { # how many CUDA devices torch sees (0 when it cannot say)
    local count
    count=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null)
    if [[ $count =~ ^[0-9]+$ ]]; then echo "$count"; else echo 0; fi
}

cores() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 4; } # nproc obeys OMP_NUM_THREADS

# Sizes: a real run on the GPU, or the smallest that still exercises every path on the CPU.
CORES=$(cores)
if ((DRY_RUN)); then
    DEVICE=cpu EPOCHS=1 WORKERS=1 # workers: evaluate.py and predict.py's, so the dry run starts one
    # A small copy of the demo data (64 training, 32 validation images): every step runs, in seconds
    VAL_DIR=$WORK/tiny-demo/val
    TRAIN_SIZE=(--data "$WORK/tiny-demo" --image-size 32 --batch-size 8 --workers 0)
    COMPILE_SIZE=(--batch-size 16)
    PINNED_SIZE=()
    LOOP_SIZE=(--image-size 32 --batch-size 4 --batches 2 --warmup 0 --repeats 1)
    PIPELINE_SIZE=(--image-size 32 --batch-size 4 --images 8 --workers 0 --repeats 1 --warmup 0)
else
    DEVICE=cuda:0 EPOCHS=2
    VAL_DIR=data/demo/val # written by the first run
    TRAIN_SIZE=()
    WORKERS=${GPU_CHECK_WORKERS:-$((CORES > 3 ? CORES - 2 : 1))}
    # The demo data's 960 training and 240 validation images: 48 divides both, so no batch is smaller
    COMPILE_SIZE=(--batch-size 48)
    PINNED_SIZE=(--image-size 224 --batch-size 240 --workers "$WORKERS") # 36 MiB of pinned uint8 per batch
    LOOP_SIZE=(--image-size 224 --batch-size 128 --batches 20 --warmup 2 --repeats 5)
    PIPELINE_SIZE=(--backbone resnet50 --image-size 224 --batch-size 256 --images 5120 --workers "$WORKERS"
        --repeats 3 --warmup 1)
fi
XDIST_WORKERS=${GPU_CHECK_XDIST:-$((CORES / 2 > 8 ? 8 : CORES / 2))}
PAUSE_AT=step:$EPOCHS:5 # SIGTERM arrives after this optimizer step: mid-epoch, as a scheduler's would

export MPLBACKEND=Agg PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TORCH_HOME=$WORK/torch-home
# The environment must not pick the device, nor pause a run, behind the flags' back.
unset "${PACKAGE^^}_DEVICE" "${PACKAGE^^}_TEST_PAUSE_AT"
cd "$PROJECT" || exit 2

# --- step machinery ----------------------------------------------------------------------------------------------
record() { # record STEP STATUS EXIT SECONDS FIGURE: one row of results.tsv, printed as it lands
    local figure=${5//$'\t'/ }
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$PHASE" "$1" "$2" "$3" "$4" "${figure//$'\n'/ }" >>"$RESULTS"
    printf '%-24s %-24s %5ss  %s\n' "$1" "$2" "$4" "$5"
}

skip() { record "$1" "skipped ($2)" - 0 ""; } # skip STEP WHY

status_of() { awk -F'\t' -v step="$1" '$2 == step { status = $3 } END { print status }' "$RESULTS"; }

figure() { printf '%s' "$*" >"$FIGURES/$STEP"; } # inside a step: its key figure for the summary

# What a step's child bash gets: these variables and this file's functions, as definitions (nothing exported,
# so no function or variable of this script leaks into the tests' own processes).
SHARED_VARS="PROJECT PACKAGE PYTHON DEVICE EPOCHS DRY_RUN RUNS LOGS FIGURES PAUSE_AT STEP TRAIN_SIZE LOOP_SIZE
    PIPELINE_SIZE COMPILE_SIZE PINNED_SIZE WORKERS XDIST_WORKERS VAL_DIR WORK DETERMINISTIC COMPARE PREDICTIONS"

# step NAME TIMEOUT COMMAND...: COMMAND (a program or a function of this file) runs under `timeout`, its output
# in logs/NAME.log; records ok / FAIL / timeout, the seconds, and the key figure COMMAND gave with `figure`.
step() {
    local name=$1 limit=$2 start rc status left definitions
    shift 2
    left=$((DEADLINE - $(date +%s)))
    if ((left < 20)); then skip "$name" "time budget"; return 0; fi
    if ((limit > left - 10)); then limit=$((left - 10)); fi
    STEP=$name
    # shellcheck disable=SC2086
    definitions="$(declare -p $SHARED_VARS; declare -f)"
    start=$(date +%s)
    timeout -k 15 "$limit" bash -c "$definitions"$'\n''"$@"' "$name" "$@" >"$LOGS/$name.log" 2>&1 </dev/null
    rc=$?
    case $rc in
    0) status=ok ;;
    124 | 137) status="timeout (${limit}s)" ;;
    *) status=FAIL ;;
    esac
    record "$name" "$status" "$rc" $(($(date +%s) - start)) "$(cat "$FIGURES/$name" 2>/dev/null)"
}

cuda_step() { # step that needs a CUDA device: skipped in a dry run
    if ((DRY_RUN)); then skip "$1" "no cuda"; else step "$@"; fi
}

after() { # after STEP NAME TIMEOUT COMMAND...: step NAME only if STEP passed
    local needed=$1
    shift
    if [[ $(status_of "$needed") == ok ]]; then step "$@"; else skip "$1" "needs $needed"; fi
}

# --- what the steps run (in a child bash under `timeout`) ------------------------------------------------------------
run_pytest() { # run_pytest ARGS...: the project's tests; figure: pytest's count line
    local extra=()
    read -r -a extra <<<"${GPU_CHECK_PYTEST_ARGS:-}"
    "$PYTHON" -m pytest -q -rfE -p no:cacheprovider --basetemp="$RUNS/pytest-$STEP" "$@" "${extra[@]}"
    local rc=$?
    figure "$(grep -E '^[0-9]+ (passed|failed|skipped|error|deselected)|no tests ran' "$LOGS/$STEP.log" |
        tail -n 1 | sed -E 's/ in [0-9.]+s.*//')"
    return "$rc"
}

quick_tier() { # the quick tier less the CUDA and fake-CUDA tests the steps before ran, over xdist workers
    local spread=()
    if ((XDIST_WORKERS > 1)) && "$PYTHON" -c 'import xdist' >/dev/null 2>&1; then spread=(-n "$XDIST_WORKERS"); fi
    echo "pytest-xdist: ${spread[*]:-not used}"
    run_pytest -m "not slow and not cuda and not fake_cuda" "${spread[@]}"
}

metrics_figure() { # metrics_figure RUN_DIR: the last epoch's images/s and val_acc from metrics.csv
    [[ -f $1/metrics.csv ]] || { echo "no metrics.csv"; return; }
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { ips = $col["images_per_s"]; acc = $col["val_acc"]; n++ }
        END { if (n) printf "%s img/s (last epoch), val_acc %s, %d epochs", ips, acc, n; else print "no metrics.csv rows" }' \
        "$1/metrics.csv"
}

train() { # train RUN ARGS...: train.py on the demo data, from scratch, in RUNS/RUN
    "$PYTHON" train.py --device "$DEVICE" --epochs "$EPOCHS" --no-pretrained --parallel none --seed 0 \
        "${TRAIN_SIZE[@]}" --out "$RUNS/$1" "${@:2}"
}

demo_jpegs() { # demo_jpegs DIR: the demo data in DIR/png and as JPEG files in DIR/jpeg (for --decode device)
    "$PYTHON" -c 'import sys
from pathlib import Path
from PIL import Image
from '"$PACKAGE"'.data import write_demo_dataset
root = Path(sys.argv[1])
pngs = write_demo_dataset(root / "png", train_per_class=60, val_per_class=20)
for png in pngs.rglob("*.png"):
    jpeg = root / "jpeg" / png.relative_to(pngs).with_suffix(".jpg")
    jpeg.parent.mkdir(parents=True, exist_ok=True)
    Image.open(png).convert("RGB").save(jpeg, quality=90)' "$1"
}

train_run() { # train_run RUN ARGS...: one training run; figure: its images/s and accuracy
    train "$@"
    local rc=$?
    figure "$(metrics_figure "$RUNS/$1")"
    return "$rc"
}

# The two runs compared bit for bit use deterministic algorithms (cuDNN autotuning then stays off, see
# training/hardware.py); train.py has no flag for it, so a few lines set it and call train.main.
DETERMINISTIC='import sys, torch
torch.use_deterministic_algorithms(True, warn_only=True)
sys.path.insert(0, ".")
import train
sys.exit(train.main(sys.argv[1:]))'

deterministic_train() { # deterministic_train RUN ARGS...: becomes that python process (call it in a subshell)
    CUBLAS_WORKSPACE_CONFIG=:4096:8 exec "$PYTHON" -c "$DETERMINISTIC" --device "$DEVICE" --epochs "$EPOCHS" \
        --no-pretrained --parallel none --seed 0 --precision fp32 "${TRAIN_SIZE[@]}" --out "$RUNS/$1" "${@:2}"
}

resume_reference() { # the uninterrupted run
    (deterministic_train reference)
    local rc=$?
    figure "$(metrics_figure "$RUNS/reference")"
    return "$rc"
}

resume_after_sigterm() { # SIGTERM after step PAUSE_AT (exit 143), --resume, then last.pt against the reference's
    local log=$LOGS/$STEP.interrupted.log pause_var pid rc waited=0
    pause_var=$("$PYTHON" -c "from $PACKAGE.training.pause_points import PAUSE_ENV_VAR; print(PAUSE_ENV_VAR)") ||
        return 1
    (export "$pause_var=$PAUSE_AT"; deterministic_train interrupted) >"$log" 2>&1 &
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
    figure "SIGTERM at $PAUSE_AT: exit 143; resumed: $(compare_checkpoints "$RUNS/interrupted/last.pt" \
        "$RUNS/reference/last.pt")"
    [[ $(cat "$FIGURES/$STEP") == *bit-identical* ]]
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

compare_checkpoints() { "$PYTHON" -c "$COMPARE" "$1" "$2" 2>&1 | tail -n 1; }

cuda1_refused() { # --device cuda:1 on a one-GPU (or no-GPU) machine: exit 2 and exactly one line
    local text rc lines
    text=$("$PYTHON" train.py --device cuda:1 --epochs 1 --no-pretrained --parallel none --out "$RUNS/cuda1" 2>&1)
    rc=$?
    lines=$(grep -c . <<<"$text")
    echo "$text"
    figure "exit $rc, $lines line(s): $(head -n 1 <<<"$text")"
    ((rc == 2 && lines == 1))
}

ddp_nccl() { # one rank of DistributedDataParallel under torchrun; NCCL_DEBUG=INFO shows nccl was used
    NCCL_DEBUG=INFO "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 1 train.py --parallel ddp \
        --device auto --epochs "$EPOCHS" --no-pretrained --seed 0 --out "$RUNS/ddp" "${TRAIN_SIZE[@]}"
    local rc=$?
    figure "$(grep -m 1 -o 'NCCL version [^ ]*' "$LOGS/$STEP.log" || echo 'no NCCL line'); $(metrics_figure "$RUNS/ddp")"
    return "$rc"
}

devkit_auto_free() { # the device table, and what auto:free picks
    "$PYTHON" -m "$PACKAGE.devkit" auto:free
    local rc=$?
    figure "$(grep -m 1 -E '^auto:free' "$LOGS/$STEP.log"); table: $(grep -m 1 -E '^cuda:0 |^cpu ' "$LOGS/$STEP.log" |
        tr -s ' ')"
    return "$rc"
}

PREDICTIONS='import json, pathlib, sys
rows = json.loads(pathlib.Path(sys.argv[1]).read_text())
right = sum(pathlib.Path(row["path"]).parent.name == row["label"] for row in rows)
print(f"{len(rows)} predictions on the CPU, {right} match their folder")'

predict_cpu() { # the GPU run's best.pt in predict.py --device cpu, with no GPU visible
    CUDA_VISIBLE_DEVICES="" "$PYTHON" predict.py "$RUNS/fp32/best.pt" "$VAL_DIR" --device cpu --json \
        >"$LOGS/$STEP.json" || return 1
    figure "$("$PYTHON" -c "$PREDICTIONS" "$LOGS/$STEP.json")"
}

evaluate_device() { # the fp32 run's best.pt measured by evaluate.py on the device, with loader workers
    "$PYTHON" evaluate.py "$RUNS/fp32/best.pt" --device "$DEVICE" --workers "$WORKERS" --out "$RUNS/evaluate"
    local rc=$?
    figure "$(grep -m 1 -iE 'accuracy' "$LOGS/$STEP.log" | tr -s ' ')"
    return "$rc"
}

predict_device() { # predict_device CHECKPOINT ARGS...: predict.py on the device over the demo's val images
    "$PYTHON" predict.py "$1" "$VAL_DIR" --device "$DEVICE" --workers "$WORKERS" --json "${@:2}" \
        >"$LOGS/$STEP.json" || return 1
    figure "$("$PYTHON" -c "$PREDICTIONS" "$LOGS/$STEP.json" | sed "s/on the CPU/on $DEVICE${2:+ $2}/")"
}

export_pt2_predict() { # export.py --format pt2 (its own parity check), then predict.py runs the .pt2 on the device
    "$PYTHON" export.py "$RUNS/fp32/best.pt" --format pt2 --out "$RUNS/fp32/model.pt2" || return 1
    predict_device "$RUNS/fp32/model.pt2"
}

supports() { "$PYTHON" "$1" --help 2>/dev/null | grep -q -- "$2"; } # supports SCRIPT FLAG

loop_overhead() { # loop_overhead ARGS...: figure: the median ratio project / hand-written and the rates
    "$PYTHON" benchmarks/loop_overhead.py --device "$DEVICE" "${LOOP_SIZE[@]}" "$@"
    local rc=$?
    figure "$(grep -m 1 '^median ratio project / ' "$LOGS/$STEP.log" | sed 's/.*: //') (goal >= 0.97); $(
        grep -m 1 '^median images/s' "$LOGS/$STEP.log" | sed 's/median images.s: //')"
    return "$rc"
}


pipeline_vs_memory() { # the whole pipeline from JPEG files against the same batches on the device
    local extra=() flag
    for flag in --precision --channels-last; do
        if supports benchmarks/pipeline_vs_memory.py "$flag"; then
            if [[ $flag == --precision ]]; then extra+=(--precision bf16); else extra+=(--channels-last); fi
        fi
    done
    echo "extra flags this version accepts: ${extra[*]:-none (fp32, contiguous)}"
    "$PYTHON" benchmarks/pipeline_vs_memory.py --device "$DEVICE" "${PIPELINE_SIZE[@]}" "${extra[@]}"
    local rc=$?
    figure "ratio $(grep -m 1 '^median ratio pipeline' "$LOGS/$STEP.log" | sed 's/.*: //') (goal >= 0.9); $(
        grep -E '^ *(pipeline|in memory):' "$LOGS/$STEP.log" | sed -E 's/^ *([a-z ]+):.*median ([0-9.]+)/\1 \2 img\/s/' |
            paste -sd, - | sed 's/,/, /g'); $(grep -m 1 -o 'workers [0-9]*' "$LOGS/$STEP.log"); ${extra[*]:-fp32}"
    return "$rc"
}

# --- the phases ---------------------------------------------------------------------------------------------------
phase_tests() {
    cuda_step tests-cuda 240 run_pytest -m cuda
    step tests-fake-cuda 120 run_pytest -m fake_cuda
    step tests-quick 330 quick_tier
}

phase_cuda() { cuda_step tests-cuda 240 run_pytest -m cuda; }

tiny_demo() { # the dry run's data: the demo's shapes, 16 training and 8 validation images a class
    "$PYTHON" -c "import sys, pathlib
from $PACKAGE.data.demo import write_demo_dataset
write_demo_dataset(pathlib.Path(sys.argv[1]), train_per_class=16, val_per_class=8)" "$WORK/tiny-demo"
}

phase_train() {
    if ((DRY_RUN)); then step tiny-demo 60 tiny_demo; fi
    step train-fp32 240 train_run fp32 --precision fp32
    step resume-reference 180 resume_reference
    after resume-reference resume-sigterm-resume 300 resume_after_sigterm
    if (($(gpu_count) < 2)); then
        step device-cuda1-refused 60 cuda1_refused
    else
        skip device-cuda1-refused "2+ gpus: cuda:1 exists"
    fi
    cuda_step ddp-nccl-1proc 240 ddp_nccl
    step devkit-auto-free 60 devkit_auto_free
    after train-fp32 predict-cpu 120 predict_cpu
    after train-fp32 evaluate-device 120 evaluate_device
    if ((DRY_RUN)); then skip predict-device-half "no cuda"; else
        after train-fp32 predict-device-half 120 predict_device "$RUNS/fp32/best.pt" --half; fi
    after train-fp32 export-pt2-predict 180 export_pt2_predict
    cuda_step train-bf16 240 train_run bf16 --precision bf16
    cuda_step train-fp16-clip-accum 240 train_run fp16-clip-accum --precision fp16 --clip-grad 1.0 --accum-steps 2
    cuda_step train-mixup-cutmix 240 train_run mixup-cutmix --precision bf16 --augment standard --mixup 0.2 \
        --cutmix 1.0
    cuda_step train-channels-last 240 train_run channels-last --precision fp32 --channels-last
    if ((DRY_RUN)) || supports train.py --decode; then # the device-decode path, where this version has it
        # on JPEGs: the demo's PNGs would all be decoded in the workers (the path for other formats)
        ((DRY_RUN)) || demo_jpegs "$WORK/demo-jpeg" || true  # a failure shows in the step
        cuda_step train-device-decode 240 train_run device-decode --precision bf16 --decode device \
            --data "$WORK/demo-jpeg/jpeg"
    else
        skip train-device-decode "train.py has no --decode"
    fi
    cuda_step train-cache-images 240 train_run cache-images --precision fp32 --cache-images
    cuda_step train-workers-pinned 240 train_run workers-pinned --precision bf16 --epochs 1 "${PINNED_SIZE[@]}"
}

phase_compile() {
    if ((DRY_RUN)) && [[ ! -d $WORK/tiny-demo ]]; then step tiny-demo 60 tiny_demo; fi
    cuda_step train-compile 420 train_run compile --precision bf16 --channels-last --compile --epochs 1 \
        "${COMPILE_SIZE[@]}"
}

loop_step() { # loop_step NAME TIMEOUT FLAG ARGS...: loop_overhead.py with FLAG, if this version has it
    if ((!DRY_RUN)) && ! supports benchmarks/loop_overhead.py "$3"; then
        skip "$1" "loop_overhead.py has no $3; train-* has it"
    else
        cuda_step "$1" "$2" loop_overhead "${@:3}"
    fi
}

phase_bench() {
    step loop-fp32 180 loop_overhead --precision fp32
    cuda_step loop-bf16 180 loop_overhead --precision bf16
    cuda_step loop-fp16 180 loop_overhead --precision fp16
    loop_step loop-bf16-channels-last 180 --channels-last --precision bf16
    loop_step loop-bf16-compile 300 --compile --precision bf16
    step pipeline-vs-memory 420 pipeline_vs_memory
}

# --- env.txt, the summary, the packed logs ---------------------------------------------------------------------------
ENV_PY='import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda build", torch.version.cuda)
for name in ("torchvision", "numpy", "pillow", "pytest", "tensorboard", "onnx", "onnxruntime", "matplotlib", "tqdm"):
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

write_env() {
    {
        echo "gpu_check.sh $(date -u +%FT%TZ) phases: ${PHASES[*]} dry run: $DRY_RUN"
        echo "host: $(uname -srm) cores: $(cores) project: $PROJECT"
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
        timeout 120 "$PYTHON" -c "$ENV_PY" 2>&1
        echo "--- the project's defaults"
        timeout 60 "$PYTHON" -c "from $PACKAGE.config import DEFAULT_DEVICE, TrainConfig as C
print('device', DEFAULT_DEVICE, 'precision', C().precision, 'parallel', C().parallel, 'backbone', C().backbone)" 2>&1
    } >"$OUT/env.txt"
}

finish() {
    local failed unrun
    failed=$(awk -F'\t' 'NR > 1 && ($3 == "FAIL" || $3 ~ /^timeout/)' "$RESULTS" | wc -l)
    unrun=$(awk -F'\t' 'NR > 1 && $3 == "skipped (time budget)" { print $2 }' "$RESULTS" | paste -sd ' ' -)
    {
        echo "gpu_check.sh: phases ${PHASES[*]}$( ((DRY_RUN)) && echo ' (dry run on the CPU)'), $(($(date +%s) - T0)) s"
        echo "machine: $(grep -m 1 '^cuda:0 ' "$OUT/env.txt" 2>/dev/null || echo 'no CUDA device')"
        echo
        awk -F'\t' '{ printf "%-26s %-26s %7s  %s\n", $2, $3, $5, $6 }' "$RESULTS"
        echo
        echo "$failed step(s) failed or timed out; logs: $OUT/logs.tgz"
        if [[ -n $unrun ]]; then echo "NOT CHECKED, out of time: $unrun"; fi
    } >"$OUT/summary.txt"
    echo
    cat "$OUT/summary.txt"
    cp "$RESULTS" "$LOGS/" 2>/dev/null
    find "$RUNS" -maxdepth 2 \( -name metrics.csv -o -name config.json -o -name '*.log' -o -name '*.json' \) \
        -exec sh -c 'for f; do cp "$f" "$0/run-$(basename "$(dirname "$f")")-$(basename "$f")"; done' "$LOGS" {} +
    tar -czf "$OUT/logs.tgz" -C "$WORK" logs
    # A step the budget left unrun proves nothing: its own exit status, never mistaken for a pass
    if ((failed)); then return 1; elif [[ -n $unrun ]]; then return 3; fi
}

trap 'echo "gpu_check.sh: stopped by a signal"; finish; exit 143' TERM INT
write_env
if ((!DRY_RUN)) && ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
    echo "error: $PYTHON sees no CUDA device (see $OUT/env.txt); --dry-run checks this script on the CPU" >&2
    exit 2
fi
echo "gpu_check.sh: phases ${PHASES[*]}; device $DEVICE; out $OUT; work $WORK; budget $((DEADLINE - T0)) s"
for PHASE in "${PHASES[@]}"; do
    "phase_$PHASE"
done
PHASE=end
finish
