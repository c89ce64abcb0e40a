#!/usr/bin/env bash
# perftests_alternate.sh ALTERNATE BUILD: perftests/alternate on two short variants of a 2-rank
# all-reduce: two rounds printed, each size with a cell per variant (median, range, ratios), the
# variants named; a variant whose runs fail (a bad CHORUS_ALGO) makes it exit 1 naming the command;
# bad usage (no "--", an unknown option, a non-numeric count) exits 2. Timings are printed, never
# judged. Exits 77 (SKIP) without python3 or mpirun.
set -u
alternate=${1:?usage: perftests_alternate.sh ALTERNATE BUILD}
build=${2:?usage: perftests_alternate.sh ALTERNATE BUILD}

# shellcheck source-path=SCRIPTDIR source=support/verdict.sh
. "$(dirname "$0")/support/verdict.sh"
command -v python3 >/dev/null || skip "python3 not found"
command -v mpirun >/dev/null || skip "mpirun not found"

out=$("$alternate" -r 2 -n 2 -b "$build" all_reduce_perf "-x CHORUS_WINDOW_ADAPT=0" \
    "-x CHORUS_WINDOW_ADAPT=1" -- -b 64K -e 256K -f 4 -w 1 -n 3 2>&1) ||
    fail "two variants: exit $?: $out"
echo "$out"
[ "$(grep -c '^# round ' <<<"$out")" = 2 ] || fail "not two rounds printed"
grep -q '^# \[0\] -x CHORUS_WINDOW_ADAPT=0$' <<<"$out" || fail "variant 0 not named"
grep -q '^# \[1\] -x CHORUS_WINDOW_ADAPT=1$' <<<"$out" || fail "variant 1 not named"
num='[0-9]+\.[0-9]+' # one decimal, two below 10 us
cell="\[%d\] $num \($num-$num\) \| $num \[$num\]"
for size in 65536 262144; do
    # shellcheck disable=SC2059
    re="^ +$size  $(printf "$cell" 0)   $(printf "$cell" 1)$"
    grep -Eq "$re" <<<"$out" || fail "no row for $size with both variants' cells"
done

out=$("$alternate" -r 1 -n 2 -b "$build" all_reduce_perf "-x CHORUS_ALGO=nosuch" -- -b 8 -e 8 \
    -w 1 -n 1 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "a failing variant: exit $rc, want 1: $out"
grep -q 'CHORUS_ALGO=nosuch' <<<"$out" || fail "a failing variant's command not named: $out"

for bad in "all_reduce_perf x" "-q 1 all_reduce_perf x -- -b 8" "-r two all_reduce_perf x -- -b 8"; do
    # shellcheck disable=SC2086
    out=$("$alternate" -b "$build" $bad 2>&1)
    rc=$?
    [ "$rc" = 2 ] || fail "'$bad': exit $rc, want 2: $out"
    grep -q 'alternate: ' <<<"$out" || fail "'$bad': no message: $out"
done
echo "PASS: perftests/alternate"
