# shellcheck shell=bash
# verdict.sh: sourced by the shell tests for their two ways out: skip REASON prints SKIP and exits
# 77 (ctest's skip code), fail REASON prints FAIL on stderr and exits 1.

skip() {
    echo "SKIP: $*"
    exit 77
}
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
