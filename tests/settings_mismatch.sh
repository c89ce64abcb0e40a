#!/usr/bin/env bash
# settings_mismatch.sh MPIEXEC PROGRAM: two ranks started with different values of a setting that
# decides how the ranks talk (init.c, settings_alike). Before, CHORUS_NCHANNELS 1 against 4 waited
# in the bootstrap until CHORUS_TIMEOUT_MS and CHORUS_ALGO ring against oneshot in the first
# all-reduce, both then blaming a stuck peer. Proves, with CHORUS_TIMEOUT_MS=20000: init fails on
# both ranks within 15 s, each rank's error naming the variable, for channels, CHORUS_ALGO (also
# set against unset where it allows all: the zero-copy votes run only where it is unset, and an
# invalid value on one rank), an invalid CHORUS_PROTO on one rank (it failed alone, after the
# rings), CHORUS_ZCOPY_ALLREDUCE_MIN, CHORUS_ZCOPY_MIN (set on one rank against its default:
# slotted pieces depend on it), CHORUS_ZCOPY_ALLGATHER_MIN and CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN
# (the all-gather's and the two-shot all-reduce's push votes),
# CHORUS_ALLTOALL_DIRECT_MAX and CHORUS_CMA_ADAPT (rank 0's plans for all-gathers: also where
# CHORUS_CMA_MIN is set on one rank only, at its default, which turns it off there); and that
# settings equal as taken still run (CHORUS_ALGO's list in another order; CHORUS_ZCOPY=1 and
# CHORUS_CMA_ADAPT=1, their defaults, on one rank only). PROGRAM is coll_matrix_mpi.
set -u
mpiexec=$1
prog=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail=0

# run A B: rank 0 with environment assignment A, rank 1 with B ("-" for none); sets rc and secs
run() {
    local a=() b=()
    [ "$1" != - ] && a=(-x "$1")
    [ "$2" != - ] && b=(-x "$2")
    local t0=$SECONDS
    timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root -x CHORUS_TIMEOUT_MS=20000 \
        -np 1 "${a[@]}" "$prog" --counts 7 : -np 1 "${b[@]}" "$prog" --counts 7 >"$out" 2>&1
    rc=$?
    secs=$((SECONDS - t0))
}

refused() { # refused VAR A B
    local var=$1 ok=1
    run "$2" "$3"
    if [ $rc -eq 0 ]; then
        echo "FAIL: $2 | $3: the job ran"
        ok=0
    fi
    if [ $secs -ge 15 ]; then
        echo "FAIL: $2 | $3: took $secs s (a wait for CHORUS_TIMEOUT_MS?)"
        ok=0
    fi
    for r in 0 1; do
        if ! grep -q "^rank $r: chorusCommInitMPI: .*$var" "$out"; then
            echo "FAIL: $2 | $3: rank $r's init error does not name $var"
            ok=0
        fi
    done
    if [ $ok -eq 1 ]; then
        echo "ok: $2 | $3: init fails on both ranks in $secs s, naming $var"
    else
        fail=1
        grep -E "^rank [01]:|WARN" "$out" | head -6
    fi
}

runs() { # runs A B
    run "$1" "$2"
    if [ $rc -eq 0 ] && grep -q "^PASS" "$out"; then
        echo "ok: $1 | $2: runs"
    else
        echo "FAIL: $1 | $2: exit status $rc"
        fail=1
        tail -8 "$out"
    fi
}

refused CHORUS_NCHANNELS CHORUS_NCHANNELS=1 CHORUS_NCHANNELS=4
refused CHORUS_ALGO CHORUS_ALGO=ring CHORUS_ALGO=oneshot
refused CHORUS_ALGO CHORUS_ALGO=ring,tree,oneshot,twoshot -
refused CHORUS_ALGO - CHORUS_ALGO=bogus
refused CHORUS_PROTO - CHORUS_PROTO=LL
refused CHORUS_ZCOPY_ALLREDUCE_MIN CHORUS_ZCOPY_ALLREDUCE_MIN=0 CHORUS_ZCOPY_ALLREDUCE_MIN=1M
refused CHORUS_ZCOPY_MIN CHORUS_ZCOPY_MIN=512K -
refused CHORUS_ZCOPY_ALLGATHER_MIN CHORUS_ZCOPY_ALLGATHER_MIN=0 -
refused CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN - CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN=1M
refused CHORUS_ALLTOALL_DIRECT_MAX CHORUS_ALLTOALL_DIRECT_MAX=0 CHORUS_ALLTOALL_DIRECT_MAX=1G
refused CHORUS_CMA_ADAPT CHORUS_CMA_ADAPT=0 -
refused CHORUS_CMA_ADAPT - CHORUS_CMA_MIN=16K
runs CHORUS_ALGO=ring,oneshot CHORUS_ALGO=oneshot,ring
runs CHORUS_ZCOPY=1 -
runs - CHORUS_CMA_ADAPT=1

[ $fail -eq 0 ] && echo "PASS: settings_mismatch" || echo "FAIL: settings_mismatch"
exit $fail
