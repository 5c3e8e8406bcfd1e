#!/usr/bin/env bash
# Two simulated nodes on this machine for tests/test_two_nodes.py; needs root, iproute2 and util-linux.
#
#   scripts/netns/two_nodes.sh up DIR           # two network namespaces joined by a veth pair
#   scripts/netns/two_nodes.sh run DIR N CMD... # CMD on node N (0 or 1): its network, hostname, /etc/hosts
#   scripts/netns/two_nodes.sh down DIR         # removes both namespaces (and with them the veth pair)
#
# The addresses (10.254.0.1 = node0, 10.254.0.2 = node1) exist only inside the two namespaces: the
# host gets no address, route or NAT, and nothing inside reaches anything else. Each node runs in
# its own UTS and mount namespace (unshare), with hostname nodeN and DIR/hosts.N bind-mounted on
# /etc/hosts; HOSTS_LINE_N (e.g. "127.0.1.1 node1", Debian's line) replaces that node's own entry.
# NODE_BIND_N="SRC:DST ..." bind-mounts SRC on DST for node N only: a node-local disk. `up` removes
# what it made if it fails half way (EXIT trap); the caller runs `down` when done (a test finaliser).
set -euo pipefail
action=${1:?usage: two_nodes.sh up|run|down DIR ...}
dir=${2:?usage: two_nodes.sh up|run|down DIR ...}
address=(10.254.0.1 10.254.0.2)

names() {  # the namespaces' names, made unique per DIR by `up`
    read -r id <"$dir/id"
    ns=("tdt-$id-0" "tdt-$id-1")
}

case $action in
up)
    mkdir -p "$dir"
    id=$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
    echo "$id" >"$dir/id"
    names
    trap '"$0" down "$dir"' EXIT  # a failure half way leaves nothing behind
    for n in 0 1; do ip netns add "${ns[n]}"; done
    ip link add "tdt$id-0" netns "${ns[0]}" type veth peer name "tdt$id-1" netns "${ns[1]}"
    for n in 0 1; do
        ip -n "${ns[n]}" addr add "${address[n]}/24" dev "tdt$id-$n"
        ip -n "${ns[n]}" link set "tdt$id-$n" up
        ip -n "${ns[n]}" link set lo up
    done
    trap - EXIT
    ;;
run)
    node=${3:?usage: two_nodes.sh run DIR N CMD...}
    shift 3
    names
    hosts="$dir/hosts.$node"
    own_line="HOSTS_LINE_$node"
    {
        echo "127.0.0.1 localhost"
        for n in 0 1; do
            if [[ $n == "$node" && -n ${!own_line:-} ]]; then echo "${!own_line}"; else echo "${address[n]} node$n"; fi
        done
    } >"$hosts"
    binds="NODE_BIND_$node"
    # unshare --mount makes the bind mounts private to this node's processes; exec keeps one pid chain
    exec ip netns exec "${ns[node]}" unshare --uts --mount -- bash -c '
        hostname "node$1" && mount --bind "$2" /etc/hosts || exit 1
        for pair in $3; do mount --bind "${pair%%:*}" "${pair#*:}" || exit 1; done
        shift 3
        exec "$@"' bash "$node" "$hosts" "${!binds:-}" "$@"
    ;;
down)
    [[ -s $dir/id ]] || exit 0
    names
    for n in 0 1; do ip netns del "${ns[n]}" 2>/dev/null || true; done  # takes the veth pair with it
    ;;
*)
    echo "usage: two_nodes.sh up|run|down DIR ..." >&2
    exit 2
    ;;
esac
