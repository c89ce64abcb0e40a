#!/usr/bin/env bash
# perftests_sweep.sh SWEEP BUILD_DIR: perftests/sweep with more flags for every run (-a).
#
# Proves: SWEEP -c broadcast -r 2 -a "--offset 16" exits 0, runs the six runs of one collective
# at one rank count (user and mmap0, small, mid and large sizes), each announced with the flag and
# each writing a -J file that records offset 16 (the perftests' flags.offset), and prints the
# table of those files; -a with a value the perftests refuse fails the sweep with their message.
# Timings are never judged. Exits 77 (SKIP) without mpirun or python3.
set -u
sweep=${1:?usage: perftests_sweep.sh SWEEP BUILD_DIR} build=${2:?}

# shellcheck source-path=SCRIPTDIR source=support/tool_run.sh
. "$(dirname "$0")/support/tool_run.sh"
command -v python3 >/dev/null || {
    echo "SKIP: python3 not found"
    exit 77
}
tool_run 150 sweep "$sweep" -o "$tmp/s" -c broadcast -r 2 -a "--offset 16" "$build"
runs=$(grep -c '^== broadcast_np2_.*broadcast_perf .* --offset 16' <<<"$out")
[ "$runs" -eq 6 ] || fail "$runs runs announced with --offset 16, not 6"
grep -q '^| 2 | 64 MiB |' <<<"$out" || fail "no table row for 64 MiB"
python3 - "$tmp/s" <<'PY' || fail "the -J files do not all record offset 16"
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/*.json"))
if len(files) != 6:
    sys.exit("%d -J files, not 6" % len(files))
for f in files:
    got = json.load(open(f)).get("flags", {}).get("offset")
    if got != 16:
        sys.exit("%s: flags.offset is %r" % (f, got))
PY

msg=$("$sweep" -o "$tmp/bad" -c broadcast -r 2 -a "--offset 5000" "$build" 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "a refused flag left the sweep at exit 0"
grep -q "invalid value '5000' for option --offset" <<<"$msg" ||
    fail "the sweep's failure does not carry the perftests' message: $msg"
echo "PASS"
