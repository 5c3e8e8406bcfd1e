# Sourced by .ci/run: as root on Debian/Ubuntu, stand up the one-node SLURM cluster that
# tests/test_slurm.py needs (up.sh; apt installs the packages when missing) and export its
# variables, with an EXIT trap that stops the daemons it started (down.sh, by pid) and prints the
# test's timings, whatever the outcome. Elsewhere it does nothing and the SLURM test is skipped.
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    slurm_cluster=$(mktemp -d /tmp/slurm-cluster.XXXXXX)
    trap 'scripts/slurm/down.sh "$slurm_cluster"; cat "$slurm_cluster/timings.txt" 2>/dev/null || true' EXIT
    slurm_started=$SECONDS
    eval "$(scripts/slurm/up.sh "$slurm_cluster")"
    echo "SLURM cluster up in $((SECONDS - slurm_started)) s ($slurm_cluster)"
fi
