#!/usr/bin/env bash
# Stand up a one-node SLURM cluster on this machine for tests/test_slurm.py; needs root and Debian/Ubuntu.
#
#   eval "$(sudo scripts/slurm/up.sh /tmp/slurm-cluster)"   # prints the exports the test reads
#   ...                                                     # sbatch, squeue, pytest tests/test_slurm.py
#   sudo scripts/slurm/down.sh /tmp/slurm-cluster           # stops the daemons it started, by pid
#
# Installs Debian's slurmctld, slurmd, slurm-client and munge with apt when any is missing. Every file
# (config, munge key and socket, state, logs, pid files) lives in the folder given (a new temporary
# folder if none): nothing in /etc is read or written. proctrack/linuxproc and no cgroups, so it also
# runs in a container. Two partitions: `low` (the default) and `high`, which preempts it by requeue.
# AuthInfo cred_expire=5 and SchedulerParameters sched_interval=1, so a requeued job starts again
# after about 6 s instead of the default 121 s.
set -euo pipefail
dir=${1:-$(mktemp -d /tmp/slurm-cluster.XXXXXX)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

missing=()
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$dir"/{munge,state,spool,log}
chmod 700 "$dir/munge"
head -c 1024 /dev/urandom >"$dir/munge/munge.key"
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"

host=$(hostname -s)
cpus=$(nproc)
memory=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
cat >"$dir/slurm.conf" <<CONF
ClusterName=localtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=5
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=low Nodes=$host Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=high Nodes=$host MaxTime=INFINITE State=UP PriorityTier=2
CONF

export SLURM_CONF="$dir/slurm.conf"
slurmctld -i -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 100); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
        echo "export SLURM_CONF=$dir/slurm.conf TEMPLATE_SLURM_CLUSTER=$dir"
        exit 0
    fi
    sleep 0.1
done
echo "the cluster did not come up in 10 s; see $dir/log" >&2
sinfo >&2 || true
exit 1
