#!/usr/bin/env bash
# Train with DistributedDataParallel under torchrun: one process per GPU (or per CPU share).
# Everything after the variables goes to train.py; --parallel ddp is added here.
#
# One machine, every visible GPU (rank r trains on cuda:r):
#   scripts/launch_ddp.sh --epochs 10 --out runs/ddp
# One machine without GPUs, two processes talking gloo:
#   NPROC=2 scripts/launch_ddp.sh --device cpu --epochs 1 --out runs/ddp-cpu
# Several machines: run the same line on every node. RDZV_ENDPOINT is host:port of one node
# that all nodes can reach (node 0 is fine); RDZV_ID names the job so two jobs never mix:
#   NNODES=2 NPROC=8 RDZV_ENDPOINT=node0.cluster:29500 RDZV_ID=exp1 scripts/launch_ddp.sh --epochs 10
#
# Variables: NNODES (default 1), NPROC (default: number of GPUs, else 1), RDZV_ENDPOINT,
# RDZV_ID (default image-classifier), PYTHON (default python: the environment's interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python}"
NNODES="${NNODES:-1}"
NPROC="${NPROC:-$("$PYTHON" -c 'import torch; print(torch.cuda.device_count() or 1)')}"

if [[ "$NNODES" == "1" ]]; then
  # --standalone: a private rendezvous on localhost with a free port
  exec "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC" \
    train.py --parallel ddp "$@"
fi

: "${RDZV_ENDPOINT:?multi-node runs need RDZV_ENDPOINT=host:port of the rendezvous node}"
exec "$PYTHON" -m torch.distributed.run --nnodes="$NNODES" --nproc-per-node="$NPROC" \
  --rdzv-backend=c10d --rdzv-endpoint="$RDZV_ENDPOINT" --rdzv-id="${RDZV_ID:-image-classifier}" \
  train.py --parallel ddp "$@"
