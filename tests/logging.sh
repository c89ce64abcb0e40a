#!/usr/bin/env bash
# logging.sh PROGRAM: CHORUS_DEBUG, CHORUS_DEBUG_SUBSYS and CHORUS_DEBUG_FILE do what the README says.
# PROGRAM is any Chorus program that needs no launcher (coll_matrix_threads --threads 2).
# Proves: INFO lines go to the file named by CHORUS_DEBUG_FILE (with %p expanded), carry the
# host:pid:tid [rank] CHORUS LEVEL SUBSYS prefix, list the variables that are set; a subsystem
# filter drops that subsystem; nothing of the library reaches stdout; a malformed value is an error
# that names the variable.
set -u
prog=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

CHORUS_DEBUG=INFO CHORUS_DEBUG_FILE="$dir/log.%p" "${prog[@]}" >"$dir/out" 2>"$dir/err"
check "the program passes with logging on" "[ $? -eq 0 ]"
log=$(ls "$dir"/log.* 2>/dev/null | head -1)
check "CHORUS_DEBUG_FILE with %p names a file per process" "[ -n \"$log\" ] && [[ \$log =~ log\.[0-9]+$ ]]"
check "log lines carry host:pid:tid [rank] CHORUS INFO SUBSYS" \
    "grep -Eq '^[^:]+:[0-9]+:[0-9]+ \[[0-9-]+\] CHORUS INFO INIT ' \"$log\""
check "INFO lists the variables that are set" "grep -q 'CHORUS_DEBUG_FILE set by environment' \"$log\""
check "the library writes nothing to stdout" "! grep -q CHORUS \"$dir/out\""

CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=^INIT CHORUS_DEBUG_FILE="$dir/sub.log" "${prog[@]}" >/dev/null 2>&1
check "CHORUS_DEBUG_SUBSYS=^INIT drops INIT lines" "! grep -q ' INIT ' \"$dir/sub.log\""
check "... and keeps the others" "grep -q ' ENV ' \"$dir/sub.log\""

CHORUS_DEBUG=LOUD "${prog[@]}" >/dev/null 2>"$dir/bad"
rc=$?
check "CHORUS_DEBUG=LOUD fails the run" "[ $rc -ne 0 ]"
check "... with a message naming CHORUS_DEBUG" "grep -q 'CHORUS_DEBUG=\"LOUD\"' \"$dir/bad\""
CHORUS_DEBUG_SUBSYS=COLL,BOGUS "${prog[@]}" >/dev/null 2>"$dir/bad2"
check "a malformed CHORUS_DEBUG_SUBSYS is named" "grep -q 'CHORUS_DEBUG_SUBSYS' \"$dir/bad2\""
[ $fail -eq 0 ] && echo "PASS: logging" || echo "FAIL: logging"
exit $fail
