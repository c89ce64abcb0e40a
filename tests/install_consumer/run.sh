#!/usr/bin/env bash
# run.sh BUILD_DIR [CMAKE]: the installed package works from outside the source tree.
#
# Installs BUILD_DIR into a temporary prefix, checks the installed files and that libchorus.so
# exports only chorus* symbols, then builds consumer.c three ways: with find_package(Chorus) against
# Chorus::chorus and Chorus::chorus_static, and with `mpicc $(pkg-config --cflags --libs chorus)`.
# Each runs on 2 ranks under mpirun and must print PASS. Exits 77 (SKIP) when MPI is missing.
set -euo pipefail

build=$(cd "${1:?usage: run.sh BUILD_DIR [CMAKE]}" && pwd)
cmake=${2:-cmake}
here=$(cd "$(dirname "$0")" && pwd)

# shellcheck source-path=SCRIPTDIR source=../support/verdict.sh
. "$here/../support/verdict.sh"
command -v mpicc >/dev/null || skip "mpicc not found (install libopenmpi-dev)"
command -v mpirun >/dev/null || skip "mpirun not found (install openmpi-bin)"
command -v pkg-config >/dev/null || skip "pkg-config not found"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

# quiet LOGNAME CMD...: run CMD with its output in $tmp/LOGNAME; show that output when it fails.
quiet() {
    local log=$tmp/$1
    shift
    "$@" >"$log" 2>&1 || { cat "$log"; fail "$*"; }
}

echo "== cmake --install $build --prefix $prefix"
quiet install.log "$cmake" --install "$build" --prefix "$prefix"
so=$(find "$prefix" -name libchorus.so -print -quit)
[ -n "$so" ] || fail "no libchorus.so under $prefix"
libdir=$(dirname "$so")
for f in "$libdir/libchorus.a" "$libdir/libchorus.so.0" "$libdir/pkgconfig/chorus.pc" \
    "$libdir/cmake/Chorus/ChorusConfig.cmake" "$libdir/cmake/Chorus/ChorusConfigVersion.cmake" \
    "$prefix/include/chorus.h" "$prefix/include/chorus_mpi.h"; do
    [ -e "$f" ] || fail "not installed: ${f#"$prefix"/}"
done

# The version script exports the public API only.
extra=$(nm -D --defined-only "$so" | awk '{print $NF}' |
    grep -Ev '^(chorus[A-Z]|_init$|_fini$)' || true)
if [ -n "$extra" ]; then
    fail "libchorus.so exports more than the API: $(tr '\n' ' ' <<<"$extra" | cut -c1-300)"
fi

echo "== find_package(Chorus) consumer"
quiet configure.log "$cmake" -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" \
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON
found=$(grep '^Chorus_DIR:' "$tmp/cm/CMakeCache.txt")
[ "$found" = "Chorus_DIR:PATH=$libdir/cmake/Chorus" ] || fail "not the installed package: $found"
quiet build.log "$cmake" --build "$tmp/cm"

echo "== pkg-config chorus consumer"
flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs chorus) ||
    fail "pkg-config chorus failed"
echo "pkg-config --cflags --libs chorus: $flags"
# shellcheck disable=SC2086 # $flags is a list of words
quiet mpicc.log mpicc -std=c11 -Wall -Wextra -Werror -o "$tmp/pc_consumer" "$here/consumer.c" \
    $flags -Wl,-rpath,"$libdir"

# ldd's output is captured before grep reads it: `ldd | grep -q` under pipefail fails whenever
# grep exits at its first match before ldd has written everything (SIGPIPE), which made this flaky.
for exe in "$tmp/cm/consumer" "$tmp/pc_consumer"; do
    deps=$(ldd "$exe")
    grep -q "libchorus.so.0 => $libdir/" <<<"$deps" ||
        fail "$(basename "$exe") does not load the installed library: $(grep chorus <<<"$deps")"
done
deps=$(ldd "$tmp/cm/consumer_static")
if grep -q libchorus <<<"$deps"; then
    fail "consumer_static is linked against libchorus.so"
fi

for exe in "$tmp/cm/consumer" "$tmp/cm/consumer_static" "$tmp/pc_consumer"; do
    echo "== mpirun -np 2 $(basename "$exe")"
    rc=0
    out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root -np 2 "$exe" 2>&1) || rc=$?
    echo "$out"
    if [ "$rc" -ne 0 ] || ! grep -q '^PASS' <<<"$out"; then
        fail "$(basename "$exe") failed (exit $rc)"
    fi
done
echo "install_consumer: PASS"
