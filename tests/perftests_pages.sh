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

# shellcheck source-path=SCRIPTDIR source=support/tool_run.sh
. "$(dirname "$0")/support/tool_run.sh"
tool_run 90 pages "$pages" -w 2000 "$build"
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

tool_refuses_empty all_reduce_perf "$pages"
echo "PASS"
