#!/usr/bin/env bash
# gpu-check.sh: every GPU test and GPU benchmark in one call, for a machine with a CUDA GPU (the
# `device` machine of a session that is lent one; a few minutes on one H200).
#
# Builds with CUDA in build-gpu/ for the GPU it finds, runs the GPU tests (ctest label gpu: the
# CUDA memops kernels against the host backend, memory-type detection with the real driver, every
# collective on device buffers at 2 and 4 processes sharing the GPU GPU to GPU over cuda_p2p,
# compute kernels writing each input before the call and reading each result after it on the
# caller's stream, a call returning while its stream is still busy, the same with
# CHORUS_CUDA_ASYNC=0, and staged through host memory with CHORUS_CUDA_P2P=0; the correctness
# matrix, every dtype x op x collective, on device buffers GPU to GPU and staged) and the kernel
# benchmark (cuda_memops_perf: reduce traffic rate against the device's copy rate), then
# all_reduce_perf on device buffers (--device cuda) at 2 and 4 processes over cuda_p2p and
# staged, and writes each log and summary.txt under $OUT (default: gpu-check-out/). About 3
# minutes on the H200 when nothing hangs; each step is cut at 150 s.
# GPU_CHECK_BUILD=<dir> uses a CUDA build tree made elsewhere instead (a GPU machine without
# hwloc's headers: build here with -DCMAKE_CUDA_ARCHITECTURES=90, carry the tree, and set
# LD_LIBRARY_PATH to where libhwloc.so.15 travels). Exit status: 0 when every test passed.
#
# Not in it: a device executor (channel programs run by GPU threads, DESIGN section 6's "later"):
# the host executor drives the GPU's copies and kernels. The summary says so.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
summary=$OUT/summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

say "== gpu-check $(date -u +%FT%TZ)"
if ! gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1); then
    say "no GPU: nvidia-smi failed ($(echo "$gpu" | head -1))"
    exit 77
fi
say "gpu: $(echo "$gpu" | head -1)"

build=${GPU_CHECK_BUILD:-}
if [ -z "$build" ]; then
    build=build-gpu
    t0=$SECONDS
    if cmake -S . -B "$build" -DCHORUS_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
        -DCHORUS_BUILD_TRAINER=OFF >"$OUT/build.log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" >>"$OUT/build.log" 2>&1; then
        say "build: $build in $((SECONDS - t0)) s"
    else
        say "build: FAILED in $((SECONDS - t0)) s ($(grep -m1 -iE 'error|not found' "$OUT/build.log"))"
        exit 1
    fi
else
    say "build: using $build (GPU_CHECK_BUILD)"
fi
export LD_LIBRARY_PATH="$build:${LD_LIBRARY_PATH:-}"

# mpirun as root (the GPU machine runs commands as root), more ranks than GPUs.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# A wait that never ends becomes chorusTimeout, with its message in the log, well before a step's
# 150 s cut: it tells a stall Chorus can see (a stream that does not move) from a true hang.
export CHORUS_TIMEOUT_MS=${CHORUS_TIMEOUT_MS:-30000}

status=0
# Modes: blocking = CHORUS_CUDA_ASYNC=0 (the caller waits for its stream); staged =
# CHORUS_CUDA_P2P=0 (through pinned host memory); default: GPU to GPU, returning at once.
mode_env() {
    case $1 in
    blocking) echo "-x CHORUS_CUDA_ASYNC=0 -x CHORUS_CUDA_P2P=1" ;;
    staged) echo "-x CHORUS_CUDA_ASYNC=1 -x CHORUS_CUDA_P2P=0" ;;
    *) echo "-x CHORUS_CUDA_ASYNC=1 -x CHORUS_CUDA_P2P=1" ;;
    esac
}
for t in test_cuda_memops test_cuda_device_ptr test_cuda_coll:2 test_cuda_coll:4 \
    test_cuda_coll:2:blocking test_cuda_coll:2:staged test_cuda_coll:4:staged \
    coll_matrix_cuda:2 coll_matrix_cuda:4 coll_matrix_cuda:2:staged; do
    IFS=: read -r prog np mode <<<"$t"
    name=${t//:/_}
    cmd=("$build/tests/$prog")
    # shellcheck disable=SC2046 # mode_env's words are mpirun options
    [ -n "$np" ] && cmd=(mpirun -np "$np" $(mode_env "$mode") "${cmd[@]}")
    t0=$SECONDS
    timeout 150 "${cmd[@]}" >"$OUT/$name.log" 2>&1
    rc=$?
    case $rc in
    0) res=PASS ;;
    77)
        res="SKIP, but nvidia-smi sees a GPU"
        status=1
        ;;
    *)
        res="FAIL (exit $rc)"
        status=1
        ;;
    esac
    say "$name: $res in $((SECONDS - t0)) s: $(tail -1 "$OUT/$name.log")"
done

t0=$SECONDS
if timeout 300 "$build/perftests/cuda_memops_perf" -b 1M -e 1G -f 4 -n 20 >"$OUT/cuda_memops_perf.log" 2>&1; then
    say "cuda_memops_perf ($((SECONDS - t0)) s):"
    sed 's/^/    /' "$OUT/cuda_memops_perf.log" | tee -a "$summary"
else
    say "cuda_memops_perf: FAILED ($(tail -1 "$OUT/cuda_memops_perf.log"))"
    status=1
fi

# all_reduce_perf on device buffers at 2 and 4 processes sharing the GPU: GPU to GPU, and staged;
# on a created stream (-y 0, as nccl-tests: the call returns at once) and, GPU to GPU at 2 ranks,
# on the legacy stream (-y 1: the call waits there).
t0=$SECONDS
log=$OUT/all_reduce_perf_device.log
: >"$log"
for run in 2:p2p:0 4:p2p:0 2:p2p:1 2:staged:0 4:staged:0; do
    IFS=: read -r np mode y <<<"$run"
    one=$OUT/all_reduce_perf_device_${np}_${mode}_y$y.log
    # shellcheck disable=SC2046
    timeout 150 mpirun -np "$np" $(mode_env "$mode") -x CHORUS_DEBUG=INFO \
        -x CHORUS_DEBUG_SUBSYS=INIT "$build/perftests/all_reduce_perf" \
        --device cuda -b 8 -e 64M -f 8 -n 20 -w 5 -y "$y" >"$one" 2>&1
    rc=$?
    { echo "# $np ranks, $mode, -y $y: $(mode_env "$mode")"; cat "$one"; } >>"$log"
    if [ $rc = 0 ]; then
        say "all_reduce_perf --device cuda -y $y, $np ranks, $mode:" \
            "$(grep 'Avg bus bandwidth' "$one" | tail -1)"
        grep -E '^ +(8|262144|2097152|16777216|67108864) ' "$one" | sed 's/^/    /' |
            tee -a "$summary"
    else
        say "all_reduce_perf --device cuda -y $y, $np ranks, $mode: FAILED (exit $rc:" \
            "$(tail -1 "$one"))"
        status=1
    fi
done
say "    ($((SECONDS - t0)) s; the tables and the INFO lines naming cuda_p2p are in" \
    "all_reduce_perf_device.log)"

say "not built (issue 8 leaves it for later): a device executor; the host executor drives" \
    "the GPU's copies and kernels, one stream synchronization per FIFO slot"
say "== gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
