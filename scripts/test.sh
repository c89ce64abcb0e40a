#!/usr/bin/env bash
# test.sh [CTEST_ARGS...]: install dependencies, build with -Werror, check formatting, run ctest,
# then the sanitizer stages (scripts/sanitize.sh asan, then tsan: own build trees build-asan/ and
# build-tsan/, their own test selections, about 2 minutes each on 2 cores, build included).
#
# BUILD_DIR (default build/) is the build tree; CTEST_PARALLEL_LEVEL (default 2) the number of tests
# at once (they are multi-process). Extra arguments go to the plain ctest only, e.g.
# `scripts/test.sh -R shm -V`. CHORUS_TEST_SANITIZE=0 skips the sanitizer stages.
# Fails when the build, the formatting check, any test or a sanitizer stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

# The suite opens and closes some 100000 TCP connections (the bootstraps of thousands of
# communicators, Open MPI's own); each leaves a TIME_WAIT for a minute on a port of the ephemeral
# range, and a listener on port 0 then finds none free: with the kernel's default 32768-60999 one
# test_hygiene loop held 19000 such ports, and the multi-host, net and hygiene tests running beside
# it failed with "cannot listen on ...:0: Address already in use". Widened where this may, from
# 20000: tests pick fixed ports in 10000 up to the range's start (harness_free_port, env_init.sh).
ports=/proc/sys/net/ipv4/ip_local_port_range
if [ "$(id -u)" -eq 0 ] && [ -w "$ports" ] && [ "$(awk '{print $2 - $1}' "$ports")" -lt 55000 ]; then
    was=$(tr '\t' ' ' <"$ports")
    if echo "20000 65000" >"$ports" 2>/dev/null; then
        echo "== ephemeral ports 20000-65000 (were $was): the suite's connections leave TIME_WAITs"
    fi
fi

# mpirun as root (CI and containers run as root) and with more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

build=${BUILD_DIR:-build}
status=0

echo "== clang-format --dry-run --Werror"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Tracked files and new ones not ignored, so a check before committing sees them too.
    mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- \
        '*.c' '*.cc' '*.h' '*.cu' '*.cuh' | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
    mapfile -t sources < <(find . -path "./${build#./}" -prune -o -path './build*' -prune -o \
        -type f \( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print)
fi
if [ ${#sources[@]} -gt 0 ] && ! clang-format --dry-run --Werror "${sources[@]}"; then
    echo "formatting: FAILED (fix with: clang-format -i <files>)" >&2
    status=1
fi

echo "== configure and build in $build"
cmake -S . -B "$build" -DCHORUS_WERROR=ON
cmake --build "$build" -j"$(nproc)"

echo "== ctest"
t0=$SECONDS
ctest --test-dir "$build" --output-on-failure -j"${CTEST_PARALLEL_LEVEL:-2}" "$@" || status=1
echo "== ctest: $((SECONDS - t0)) s"

if [ "${CHORUS_TEST_SANITIZE:-1}" != 0 ]; then
    for stage in asan tsan; do
        t0=$SECONDS
        if scripts/sanitize.sh "$stage"; then
            echo "== sanitize $stage: passed in $((SECONDS - t0)) s"
        else
            echo "== sanitize $stage: FAILED in $((SECONDS - t0)) s" >&2
            status=1
        fi
    done
else
    echo "== sanitizer stages skipped (CHORUS_TEST_SANITIZE=0)"
fi

if [ $status -ne 0 ]; then
    echo "test.sh: FAILED" >&2
fi
exit $status
