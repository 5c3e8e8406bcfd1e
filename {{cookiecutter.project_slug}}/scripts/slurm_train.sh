#!/bin/bash
# Train under SLURM with torchrun, requeued on preemption and before the time limit; every start of
# the job resumes from last.pt. Submit from the project folder: sbatch scripts/slurm_train.sh
# What SLURM and torchrun do with the signals, and the settings that matter: docs/preemption.md.
#SBATCH --job-name=exp1
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1            # one torchrun agent per node; it starts one process per GPU
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=32
#SBATCH --time=24:00:00
#SBATCH --requeue                      # a preempted job (or one on a failed node) goes back in the queue
#SBATCH --signal=B:USR1@300            # USR1 to this script (B:) 300 s before the time limit, or up to 60 s earlier
#SBATCH --open-mode=append             # a requeued job appends to the same log

head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
# The rendezvous port is the job's own: two jobs whose first node is the same never meet in one
# rendezvous (with a fixed port, scancel of one killed the other). A requeued job keeps its id, so its port;
# 10000-29999 stays below Linux's ephemeral ports (32768 and up), which outgoing connections take.
port=$((10000 + SLURM_JOB_ID % 20000))

# Time limit near: SIGTERM to every process of the job's steps (scancel --signal leaves this script
# alone); the training processes save last.pt at the next step and exit 143. Then back in the queue.
# Not `kill -TERM $srun_pid`: srun answers SIGTERM by killing the step, and nothing is saved.
on_time_limit() {
    echo "time limit near: stopping the training processes, then requeueing" >&2
    scancel --signal=TERM "$SLURM_JOB_ID"
    wait "$srun_pid"
    scontrol requeue "$SLURM_JOB_ID"
}
trap on_time_limit USR1

srun --kill-on-bad-exit=1 torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=8 --max-restarts=3 \
    --rdzv-backend=c10d --rdzv-endpoint="$head:$port" --rdzv-id="$SLURM_JOB_ID" \
    train.py --parallel ddp --data /shared/imagenet --epochs 90 \
    --out "/shared/runs/$SLURM_JOB_NAME" --resume auto --save-every-minutes 20 &
srun_pid=$!
wait "$srun_pid"   # in the background, so bash runs the trap as soon as the signal arrives
wait "$srun_pid"   # after the trap, wait for srun's own exit
