# shellcheck shell=bash
# tool_run.sh: sourced by the tests of perftests' scripts (perftests_floor.sh, perftests_pages.sh).
# On sourcing: fail() (prints FAIL and exits 1), SKIP (exit 77) without mpirun, and $tmp, a
# directory removed on exit. tool_run SECONDS NAME CMD...: runs CMD in a session of its own, so
# that a run past SECONDS is killed whole (mpirun, the ranks and the probes with it), prints its
# output, leaves it in $out, and fails if it ran too long or exited non-zero.
# tool_refuses_empty WHAT CMD...: CMD with an empty build directory appended exits 2 and names
# WHAT as missing.

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

tool_run() {
    local secs=$1 name=$2
    shift 2
    setsid "$@" >"$tmp/out" 2>&1 &
    local pid=$!
    for _ in $(seq "$secs"); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null
        fail "$name ran past $secs s: $(cat "$tmp/out")"
    fi
    wait "$pid"
    local rc=$?
    out=$(cat "$tmp/out")
    echo "$out"
    [ "$rc" -eq 0 ] || fail "$name exited $rc"
}

tool_refuses_empty() {
    local what=$1
    shift
    mkdir -p "$tmp/empty"
    local msg rc
    msg=$("$@" "$tmp/empty" 2>&1)
    rc=$?
    [ "$rc" -eq 2 ] || fail "a build dir without the probes gave exit $rc, not 2"
    grep -q "$what is missing" <<<"$msg" || fail "the refusal does not name what is missing: $msg"
}
