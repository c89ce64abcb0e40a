#!/usr/bin/env bash
# fuzz.sh: build the bootstrap and environment fuzz targets (tests/fuzz/) with clang's libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, and run each for a while.
#
#   scripts/fuzz.sh [-t SECONDS] [--update] [--minimize] [TARGET...]
#
# TARGET: fuzz_boot_hello, fuzz_frame, fuzz_env (default: all three). -t: seconds per target
# (default 60). Each run starts from tests/fuzz/corpus/TARGET and writes what it finds to a
# temporary directory; with --update, the inputs that add coverage are merged into the corpus
# (named by their SHA-1). --minimize rewrites each corpus to its seeds (seed-*) plus the fewest
# other inputs that keep its edge coverage. A crash or failed check leaves its input in
# build-fuzz/crashes/ and makes the script exit 1; replay it with
#   build-fuzz/TARGET build-fuzz/crashes/TARGET-crash-...
# or with the gcc replay driver: <build>/tests/fuzz_replay_... FILE. The library is compiled with
# coverage too, so the fuzzer steers into bootstrap code, not only the target's.
# Environment: CC (default clang), FUZZ_JOBS (parallel compiles, default 1).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=60
update=0
minimize=0
targets=()
while [ $# -gt 0 ]; do
    case $1 in
    -t) seconds=$2; shift 2 ;;
    --update) update=1; shift ;;
    --minimize) minimize=1; shift ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    fuzz_boot_hello | fuzz_frame | fuzz_env) targets+=("$1"); shift ;;
    *) echo "fuzz.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_boot_hello fuzz_frame fuzz_env)

cc=${CC:-clang}
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
    "$cc" -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
    echo "fuzz.sh: $cc cannot build libFuzzer targets (install clang and libclang-rt-dev:" \
        "scripts/deps.sh)" >&2
    exit 2
fi

out=$root/build-fuzz
mkdir -p "$out/obj" "$out/crashes"
incs=(-I"$root/include" -I"$root/src" -I"$root/transports" -I"$root/algorithms"
    -I"$root/kernels")
# shellcheck disable=SC2207
hwloc=($(pkg-config --cflags hwloc))
# shellcheck disable=SC2207
hwloc_libs=($(pkg-config --libs hwloc))
flags=(-g -O1 -fno-omit-frame-pointer '-fsanitize=address,undefined' -fno-sanitize-recover=all
    -DCHORUS_HAVE_CUDA=0 '-DCHORUS_VERSION_STRING="fuzz"' "${incs[@]}"
    "${hwloc[@]}")

# Compile each source that changed since its object (header changes: delete build-fuzz/).
compile() { # SOURCE OBJECT SANITIZE
    if [ ! -e "$2" ] || [ "$1" -nt "$2" ]; then
        nice "$cc" "${flags[@]}" "-fsanitize=$3" -c "$1" -o "$2"
    fi
}
objs=()
sources=("$root"/src/*.c "$root"/transports/*.c "$root"/algorithms/*.c "$root"/kernels/*.c
    "$root/tests/fuzz/fuzz_common.c")
echo "fuzz.sh: compiling the library with coverage and sanitizers (${#sources[@]} files)"
pids=()
for s in "${sources[@]}"; do
    o=$out/obj/$(basename "$(dirname "$s")")_$(basename "$s" .c).o
    objs+=("$o")
    compile "$s" "$o" fuzzer-no-link &
    pids+=($!)
    if [ ${#pids[@]} -ge "${FUZZ_JOBS:-1}" ]; then
        wait "${pids[0]}"
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do wait "$p"; done

status=0
for t in "${targets[@]}"; do
    nice "$cc" "${flags[@]}" -fsanitize=fuzzer "$root/tests/fuzz/$t.c" "${objs[@]}" \
        "${hwloc_libs[@]}" -lpthread -ldl -lm -o "$out/$t"
    corpus=$root/tests/fuzz/corpus/$t
    if [ "$minimize" = 1 ]; then
        fresh=$(mktemp -d)
        cp "$corpus"/seed-* "$fresh"/
        others=$(mktemp -d)
        find "$corpus" -maxdepth 1 -type f ! -name 'seed-*' -exec cp {} "$others"/ \;
        "$out/$t" -merge=1 -use_counters=0 "$fresh" "$others" >"$out/$t.merge.log" 2>&1
        rm -f "$corpus"/*
        cp "$fresh"/* "$corpus"/
        rm -rf "$fresh" "$others"
        echo "fuzz.sh: $t: corpus minimized to $(find "$corpus" -type f | wc -l) files"
        continue
    fi
    found=$(mktemp -d)
    echo "fuzz.sh: $t for ${seconds}s (log: $out/$t.log)"
    rc=0
    nice "$out/$t" -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$out/crashes/$t-" "$found" "$corpus" \
        >"$out/$t.log" 2>&1 || rc=$?
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$out/$t.log" |
        sed "s/^/  $t: /" || true
    if [ "$rc" -ne 0 ]; then
        echo "fuzz.sh: $t FAILED (exit $rc): see $out/$t.log and $out/crashes/" >&2
        grep -E 'ERROR|FUZZ CHECK FAILED|runtime error|Test unit written' "$out/$t.log" | head -5 >&2
        status=1
    fi
    echo "  $t: $(find "$found" -type f | wc -l) new inputs this run"
    if [ "$update" = 1 ]; then
        before=$(find "$corpus" -type f | wc -l)
        "$out/$t" -merge=1 "$corpus" "$found" >"$out/$t.merge.log" 2>&1
        echo "  $t: corpus $before -> $(find "$corpus" -type f | wc -l) files"
    fi
    rm -rf "$found"
done
exit $status
