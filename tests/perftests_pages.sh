#!/usr/bin/env bash
# perftests_pages.sh PAGES BUILD_DIR: perftests/pages counts one rank's pages and prints them.
#
# Proves: PAGES BUILD_DIR exits 0 and prints its summary line (the collective, 4 ranks, 8 B, a
# positive page count, the window), a libchorus line with a positive count that is at most the
# total, and libchorus' page numbers (hexadecimal, at least one); PAGES refuses a build directory
# without its probes (exit 2, naming what is missing). The counts are never judged. Exits 77
# (SKIP) without mpirun.
set -u
pages=${1:?usage: perftests_pages.sh PAGES BUILD_DIR} build=${2:?}

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
# In a session of its own, so that a run past the deadline is killed whole.
setsid "$pages" -w 2000 "$build" >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 90); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null
    fail "pages ran past 90 s: $(cat "$tmp/out")"
fi
wait "$pid"
rc=$?
out=$(cat "$tmp/out")
echo "$out"
[ "$rc" -eq 0 ] || fail "pages exited $rc"
total=$(sed -n 's/^all_reduce, 4 ranks, 8 B: one rank touched \([0-9][0-9]*\) pages in 2000 us$/\1/p' <<<"$out")
if [ -z "$total" ] || [ "$total" -le 0 ]; then
    fail "no summary line with a positive page count"
fi
lib=$(awk '$1 == "libchorus" && NF == 2 {print $2}' <<<"$out")
if [ -z "$lib" ] || [ "$lib" -le 0 ] || [ "$lib" -gt "$total" ]; then
    fail "libchorus' count '$lib' is not within 1..$total"
fi
grep -Eq '^  libchorus pages \(file offset / 4 KiB\):( [0-9a-f]+)+$' <<<"$out" ||
    fail "no libchorus page numbers"

mkdir "$tmp/empty"
msg=$("$pages" "$tmp/empty" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a build dir without the probes gave exit $rc, not 2"
grep -q 'is missing' <<<"$msg" || fail "the refusal does not name what is missing: $msg"
echo "PASS"
