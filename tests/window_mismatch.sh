#!/usr/bin/env bash
# window_mismatch.sh MPIEXEC PROGRAM: two ranks run with different CHORUS_DIRECT_BUFFSIZE. Each maps
# the other's node-local window at its own size; mapped past the end of the smaller one, the first
# touch was a SIGBUS (rank 1 died in init). Proves: the correctness matrix passes (the collectives
# run the ring) and rank 0 warns that the ranks' windows differ, naming the variable.
set -u
mpiexec=$1
prog=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$mpiexec" --oversubscribe --allow-run-as-root -np 1 -x CHORUS_DIRECT_BUFFSIZE=4096 "$prog" "$@" \
    : -np 1 -x CHORUS_DIRECT_BUFFSIZE=16384 "$prog" "$@" >"$out" 2>&1
rc=$?
fail=0
if [ $rc -eq 0 ]; then echo "ok: the matrix passes"; else echo "FAIL: exit status $rc"; fail=1; fi
if grep -q "different CHORUS_DIRECT_BUFFSIZE" "$out"; then
    echo "ok: the warning names CHORUS_DIRECT_BUFFSIZE"
else
    echo "FAIL: no warning naming CHORUS_DIRECT_BUFFSIZE"
    fail=1
fi
[ $fail -eq 0 ] || tail -20 "$out"
[ $fail -eq 0 ] && echo "PASS: window_mismatch" || echo "FAIL: window_mismatch"
exit $fail
