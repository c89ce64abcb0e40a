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

# shellcheck source-path=SCRIPTDIR source=support/tool_run.sh
. "$(dirname "$0")/support/tool_run.sh"
tool_run 120 floor "$floor" -r 1 -n 300 "$build"
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

tool_refuses_empty "switch_cost" "$floor"
echo "PASS"
