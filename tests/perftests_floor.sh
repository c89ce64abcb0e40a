#!/usr/bin/env bash
# perftests_floor.sh FLOOR BUILD_DIR: perftests/floor runs one short round and prints it.
#
# Proves: FLOOR -r 1 -n 300 BUILD_DIR exits 0 and prints its header and one row per size (8, 32
# and 128 B), each with the round, the hand-over costs, the models' times (unbound and pinned),
# Chorus' and Open MPI's times and both ratios as positive numbers, the ratios being the times'
# quotients (the last over the faster model); FLOOR refuses a build directory without the probes
# (exit 2, naming what is missing). Timings are never judged. Exits 77 (SKIP) without mpirun.
set -u
floor=${1:?usage: perftests_floor.sh FLOOR BUILD_DIR} build=${2:?}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
command -v mpirun >/dev/null || {
    echo "SKIP: mpirun not found"
    exit 77
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# In a session of its own, so that a run past the deadline is killed whole (mpirun, the ranks
# and the probes with it), not only the script.
setsid "$floor" -r 1 -n 300 "$build" >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 120); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null
    fail "floor ran past 120 s: $(cat "$tmp/out")"
fi
wait "$pid"
rc=$?
out=$(cat "$tmp/out")
echo "$out"
[ "$rc" -eq 0 ] || fail "floor exited $rc"
grep -q '^# round .*ompi/model$' <<<"$out" || fail "no header line"
rows=$(grep -v '^#' <<<"$out")
[ "$(wc -l <<<"$rows")" -eq 3 ] || fail "expected 3 rows (8, 32, 128 B)"
awk 'BEGIN { want[8]; want[32]; want[128] }
    {
        if (NF != 10) { print "row with " NF " fields: " $0; bad = 1; next }
        for (i = 2; i <= 10; i++)
            if ($i !~ /^[0-9]+(\.[0-9]+)?$/ || $i + 0 <= 0) { print "field " i " not positive: " $0; bad = 1 }
        if (!($6 in want)) { print "unexpected size " $6; bad = 1 }
        delete want[$6]
        floor = $5 < $4 ? $5 : $4
        if (($9 - $8 / $7) ^ 2 > 0.01 ^ 2 * 4 || ($10 - $8 / floor) ^ 2 > 0.01 ^ 2 * 4) {
            print "ratios are not the quotients of the times: " $0; bad = 1
        }
    }
    END { for (s in want) { print "size " s " missing"; bad = 1 } exit bad }' <<<"$rows" ||
    fail "rows malformed"

mkdir "$tmp/empty"
msg=$("$floor" "$tmp/empty" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a build dir without the probes gave exit $rc, not 2"
grep -q 'switch_cost is missing' <<<"$msg" || fail "the refusal does not name the missing probe: $msg"
echo "PASS"
