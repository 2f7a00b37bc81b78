#!/bin/sh
# dist_hosts.sh STOKE WORKDIR - `mpirun -np 2 stoke train` across two hosts: two network
# namespaces joined by a veth pair, each with its own host name (a UTS namespace), one
# rank in each, OpenMPI's launch agent entering the namespace where ssh would log in,
# and OpenMPI's TCP transport held to the veth, so the gradients really cross an
# interface (its byte counters are checked against the gradients' bytes). The run must
# succeed, its log name the world of 2 and both hosts, and its checkpoint's weights equal
# bit for bit those of the same run with both ranks on one host (`mpirun -np 2`): the
# reduction is the same. Skipped (77, saying why) where namespaces cannot be made (not
# root, no CAP_NET_ADMIN, no `ip`), where OpenMPI is missing, or stoke has no MPI.
# Every mpirun is under `timeout`; the namespaces (and anything left in them) go on
# any exit.
set -u
stoke=$1
work=$2
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
need_fashion_mnist
clear_config_env
unset OMP_NUM_THREADS

skip() {
    echo "skip: $*"
    exit 77
}
for c in ip mpirun unshare timeout; do
    command -v $c >/dev/null 2>&1 || skip "no \`$c\` here (iproute2, openmpi-bin, util-linux, coreutils)"
done
[ "$(id -u)" -eq 0 ] || skip "network namespaces need root (CAP_NET_ADMIN); running as uid $(id -u)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ranks under mpirun without leak detection in the ASan build: OpenMPI keeps what its
# plugins allocate until exit (as tests/e2e/train_dist.sh); memory errors still fail
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# no user's OpenMPI settings leak in (a hostfile, other transports)
unset OMPI_MCA_btl OMPI_MCA_pml OMPI_MCA_orte_default_hostfile OMPI_MCA_btl_tcp_if_include \
    OMPI_MCA_oob_tcp_if_include OMPI_MCA_plm_rsh_agent

# Names unique to this run (several may run at once); an interface's name is per
# namespace, so both ends can carry the same one.
ns1=stoke-h1-$$ ns2=stoke-h2-$$
host1=stoke-host1 host2=stoke-host2
addr1=10.77.0.1 addr2=10.77.0.2
veth=stkdist0
made=""
cleanup() {
    for ns in $made; do
        # whatever a timed-out run left inside (orted, a rank) is ours: end it by its id
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP PIPE

ip netns add $ns1 2>"$work/ns.err" || skip "cannot make a network namespace: $(cat "$work/ns.err")"
made=$ns1
ip netns add $ns2 2>"$work/ns.err" || skip "cannot make a second network namespace: $(cat "$work/ns.err")"
made="$ns1 $ns2"
if ! ip link add $veth netns $ns1 type veth peer name $veth netns $ns2 2>"$work/ns.err"; then
    skip "cannot make a veth pair between the namespaces: $(cat "$work/ns.err")"
fi
ip -n $ns1 addr add $addr1/24 dev $veth &&
    ip -n $ns2 addr add $addr2/24 dev $veth &&
    ip -n $ns1 link set lo up && ip -n $ns2 link set lo up &&
    ip -n $ns1 link set $veth up && ip -n $ns2 link set $veth up ||
    { fail "configuring the veth pair"; e2e_end; exit 1; }
unshare --uts true 2>/dev/null || skip "cannot make a UTS namespace (unshare --uts) for the hosts' names"

# The launch agent: OpenMPI runs `AGENT HOST COMMAND...` where it would run `ssh HOST
# COMMAND...`; this one enters HOST's namespace, under HOST's name, and runs COMMAND in a
# shell as sshd would.
agent=$work/agent
cat >"$agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in
    $addr1) ns=$ns1 name=$host1 ;;
    $addr2) ns=$ns2 name=$host2 ;;
    *) echo "agent: no namespace for host \$host" >&2; exit 255 ;;
esac
exec ip netns exec \$ns unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$*"' "\$name" "\$@"
EOF
chmod +x "$agent"
printf '%s slots=1\n%s slots=1\n' $addr1 $addr2 >"$work/hostfile"

# on_hosts SECONDS CMD...: mpirun started on the first host (in its namespace, under its
# name), one rank a host, everything over the veth.
on_hosts() {
    limit=$1; shift
    timeout -k 10 "$limit" ip netns exec $ns1 unshare --uts \
        sh -c 'hostname "$0" && exec "$@"' $host1 \
        mpirun --hostfile "$work/hostfile" -np 2 --map-by node \
        --mca plm_rsh_agent "$agent" --mca pml ob1 --mca btl tcp,self \
        --mca btl_tcp_if_include $veth --mca oob_tcp_if_include $veth \
        -x STOKE_CACHE_DIR "$@"
}
# counters VAR: the veth's bytes in the first namespace, "tx rx"
counters() {
    ip netns exec $ns1 sh -c "cat /sys/class/net/$veth/statistics/tx_bytes /sys/class/net/$veth/statistics/rx_bytes" | tr '\n' ' '
}

# The hosts answer, each under its own name (what follows fails for stoke, not for this).
on_hosts 60 hostname >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qx $host1 "$out" && grep -qx $host2 "$out"; then
    ok "mpirun reaches both namespaces ($host1, $host2)"
else
    fail "mpirun across the namespaces: exit $rc"; show "$out"; e2e_end; exit 1
fi

# one epoch of 8 steps: 1024 samples, 2 ranks x 64
common="--model mlp --hidden 128 --batch-size 64 --limit 1024 --val-limit 256 --epochs 1 \
--threads 1 --workers 0 --precision fp32 --seed 7 --log-every 1 --no-monitor"

set -- $(counters)
tx0=$1 rx0=$2
on_hosts 300 "$stoke" train $common --checkpoint "$work/hosts.safetensors" \
    --log "$work/hosts.jsonl" >"$work/hosts.out" 2>&1
rc=$?
set -- $(counters)
tx=$(($1 - tx0)) rx=$(($2 - rx0))
if grep -q "built without MPI" "$work/hosts.out"; then
    skip "this stoke has no MPI: $(grep "built without MPI" "$work/hosts.out" | head -1)"
fi
if [ $rc -eq 0 ]; then ok "two hosts: stoke train exit 0"; else fail "two hosts: stoke train exit $rc"; show "$work/hosts.out"; fi

# the log: the world in the start record, each rank's host in the epoch record
if [ -s "$work/hosts.jsonl" ]; then
    "$py" - "$work/hosts.jsonl" $host1 $host2 >"$work/world.txt" 2>&1 <<'EOF'
import json, sys
path, h1, h2 = sys.argv[1:4]
rs = [json.loads(l) for l in open(path)]
start = next(r for r in rs if r["type"] == "start")
hosts = [k.get("host") for r in rs if r["type"] == "epoch" for k in r.get("ranks", [])]
steps = max((r["step"] for r in rs if r["type"] in ("step", "epoch")), default=0)
print(f"world {start.get('world')} hosts {sorted(set(hosts))} parameters {start['parameters']} steps {steps}")
sys.exit(0 if start.get("world") == 2 and {h1, h2} == set(hosts) else 1)
EOF
    if [ $? -eq 0 ]; then ok "log: $(cat "$work/world.txt")"; else fail "log's world and hosts"; show "$work/world.txt"; fi
    params=$(sed -n 's/.* parameters \([0-9]*\).*/\1/p' "$work/world.txt")
    steps=$(sed -n 's/.* steps \([0-9]*\).*/\1/p' "$work/world.txt")
else
    fail "no log written"; params="" steps=0
fi
# rank 0 speaks for the world (the other ranks' hosts are in the log, above)
if grep -q "^data parallel: rank 0 of 2 on $host1, gradients over mpi" "$work/hosts.out"; then
    ok "rank 0 says it is on $host1 of a world of 2"
else
    fail "no data parallel line for rank 0 on $host1"; show "$work/hosts.out"
fi

# The traffic crossed the veth: each all-reduce of S gradient bytes sends at least S
# from each of 2 ranks (a ring's 2(N-1)/N x S, recursive doubling's S), once per step.
if [ -n "$params" ] && [ "${steps:-0}" -gt 0 ]; then
    need=$((params * 4 * steps))
    if [ $tx -ge $need ] && [ $rx -ge $need ]; then
        ok "the veth carried tx $tx rx $rx bytes >= $steps steps x $params x 4 = $need"
    else
        fail "the veth carried tx $tx rx $rx bytes, under $steps steps x $params gradients x 4 bytes = $need"
    fi
else
    fail "no step records or parameter count to check the veth's bytes against (tx $tx rx $rx)"
fi

# The same run with both ranks on one host (shared memory between them).
timeout -k 10 300 mpirun -np 2 --oversubscribe "$stoke" train $common \
    --checkpoint "$work/one.safetensors" --log "$work/one.jsonl" >"$work/one.out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "one host: stoke train exit 0"; else fail "one host: stoke train exit $rc"; show "$work/one.out"; fi

# The weights, tensor by tensor, bit for bit (the metadata differs: paths, config).
if [ -s "$work/hosts.safetensors" ] && [ -s "$work/one.safetensors" ]; then
    if "$py" "$here/../ckpt_tensors.py" "$work/hosts.safetensors" "$work/one.safetensors" >"$work/cmp.txt" 2>&1; then
        ok "weights equal bit for bit to one host's"
    else
        fail "weights differ from one host's"; show "$work/cmp.txt"
    fi
else
    fail "a checkpoint is missing"
fi
e2e_end
