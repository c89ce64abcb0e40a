#!/usr/bin/env bash
# ib_fallback.sh MPIEXEC HOSTID_WRAP COLL_MATRIX LIBSOFTVERBS: on a machine without an RDMA
# device the IB plugin reports "no IB device" and a two-host job runs over sockets; CHORUS_NET=IB
# there fails with an error that says no IB port was found (and how to see why); and a job where
# one rank runs IB (on the emulator) and the other sockets fails at once naming both plugins,
# never hanging on the mismatched handshake.
# Exits 77 (SKIP) when this machine does have an active IB port: the fallback cannot be shown.
set -uo pipefail
mpiexec=$1 wrap=$2 prog=$3 softverbs=$4
if compgen -G '/sys/class/infiniband/*/ports/*/state' >/dev/null &&
    grep -qs ACTIVE /sys/class/infiniband/*/ports/*/state; then
    echo "SKIP: this machine has an active RDMA port; the fallback to sockets is not shown here"
    exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run=("$mpiexec" --oversubscribe --allow-run-as-root -np 2 -x CHORUS_DEBUG=INFO
    -x CHORUS_DEBUG_SUBSYS=NET "$wrap" 1 "$prog" --counts 7)
fail=0
if ! "${run[@]}" >"$out/auto.log" 2>&1; then
    echo "FAIL: the default run did not pass:"; tail -20 "$out/auto.log"; fail=1
fi
for want in "IB plugin: no " "net plugin Socket"; do
    if ! grep -q "$want" "$out/auto.log"; then
        echo "FAIL: the default run's log lacks \"$want\""; fail=1
    fi
done
grep -m1 "IB plugin: no " "$out/auto.log"
if timeout 60 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 -x CHORUS_NET=IB \
    "$wrap" 1 "$prog" --counts 7 >"$out/ib.log" 2>&1; then
    echo "FAIL: CHORUS_NET=IB passed on a machine without an IB port"; fail=1
elif ! grep -q "CHORUS_NET=IB, but no active IB port" "$out/ib.log"; then
    echo "FAIL: CHORUS_NET=IB failed without saying why:"; tail -20 "$out/ib.log"; fail=1
else
    grep -m1 "CHORUS_NET=IB, but no active IB port" "$out/ib.log"
fi
# Rank 0 on IB (the emulator), rank 1 on sockets.
cat >"$out/mixed.sh" <<EOS
#!/usr/bin/env bash
[ "\${OMPI_COMM_WORLD_RANK:-}" = 0 ] && export CHORUS_NET=IB CHORUS_IBVERBS_PATH=$softverbs
exec "\$@"
EOS
chmod +x "$out/mixed.sh"
if timeout 60 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$out/mixed.sh" "$wrap" 1 \
    "$prog" --counts 7 >"$out/mixed.log" 2>&1; then
    echo "FAIL: ranks on different net plugins passed"; fail=1
elif ! grep -q "runs the IB net plugin, this rank Socket" "$out/mixed.log"; then
    echo "FAIL: mixed net plugins failed without naming them:"; tail -20 "$out/mixed.log"; fail=1
else
    grep -m1 "runs the IB net plugin, this rank Socket" "$out/mixed.log"
fi
[ $fail -eq 0 ] && echo "PASS: no IB device: sockets by default, a clear error with CHORUS_NET=IB and with mixed plugins"
exit $fail
