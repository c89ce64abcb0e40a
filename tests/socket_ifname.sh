#!/usr/bin/env bash
# socket_ifname.sh PROGRAM...: CHORUS_SOCKET_IFNAME picks the bootstrap interface (NCCL's syntax).
# Proves: a prefix (lo), an exclusion (^lo) and an exact name (=lo) each bring the job up on the
# interface they name, as the INFO line says; a name no interface matches fails the init with a
# message naming the variable, not a hang.
set -u
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }
run() { env CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=BOOT "$@" 2>&1; }

out=$(run CHORUS_SOCKET_IFNAME=lo "$@")
check "prefix lo: the job runs" "grep -q '^PASS' <<<\"\$out\""
check "prefix lo: listeners on lo" "grep -q 'bootstrap listener on 127.0.0.1:[0-9]* (lo)' <<<\"\$out\""
out=$(run CHORUS_SOCKET_IFNAME==lo "$@")
check "exact =lo: listeners on lo" "grep -q 'listener on .* (lo)' <<<\"\$out\" && grep -q '^PASS' <<<\"\$out\""
if ip -o link show up 2>/dev/null | grep -vq ': lo:'; then
    out=$(run CHORUS_SOCKET_IFNAME=^lo "$@")
    check "exclusion ^lo: the job runs off lo" \
        "grep -q '^PASS' <<<\"\$out\" && ! grep -q 'listener on .* (lo)' <<<\"\$out\""
else
    echo "note: no interface besides lo is up; ^lo not checked"
fi
out=$(timeout 60 env CHORUS_SOCKET_IFNAME=bogus0 "$@" 2>&1)
rc=$?
check "no match: init fails (not a hang)" "[ $rc -ne 0 ] && [ $rc -ne 124 ]"
check "no match: the message names CHORUS_SOCKET_IFNAME" \
    "grep -q 'CHORUS_SOCKET_IFNAME=\"bogus0\"' <<<\"\$out\""
[ $fail -eq 0 ] && echo "PASS: socket_ifname" || echo "FAIL: socket_ifname"
exit $fail
