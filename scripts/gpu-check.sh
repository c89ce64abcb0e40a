#!/usr/bin/env bash
# gpu-check.sh: every GPU test and GPU benchmark in one call, for a machine with a CUDA GPU (the
# `device` machine of a session that is lent one; a few minutes on one H200).
#
# Builds with CUDA in build-gpu/ for the GPU it finds, runs the GPU tests (ctest label gpu: the
# CUDA memops kernels against the host backend, memory-type detection with the real driver, every
# collective on device buffers at 2 and 4 processes sharing the GPU, a call returning while its
# stream is still busy, and the same at 2 processes with CHORUS_CUDA_ASYNC=0) and the kernel
# benchmark (cuda_memops_perf: reduce traffic rate against the device's copy rate), then
# all_reduce_perf on device buffers (--device cuda) at 2 and 4 processes, and at 2 blocking,
# and writes each log and summary.txt under $OUT (default: gpu-check-out/).
# GPU_CHECK_BUILD=<dir> uses a CUDA build tree made elsewhere instead (a GPU machine without
# hwloc's headers: build here with -DCMAKE_CUDA_ARCHITECTURES=90, carry the tree, and set
# LD_LIBRARY_PATH to where libhwloc.so.15 travels). Exit status: 0 when every test passed.
#
# Not in it yet, because they are not built yet (issue 8): the device executor and the cuda_p2p
# transport (device buffers are staged through pinned host memory for now, ordered with the
# stream by stream memory operations). The summary says so, so that nothing reads as skipped in
# silence.
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

status=0
# test_cuda_coll:2:blocking runs with CHORUS_CUDA_ASYNC=0 (the caller waits for its stream).
for t in test_cuda_memops test_cuda_device_ptr test_cuda_coll:2 test_cuda_coll:4 \
    test_cuda_coll:2:blocking; do
    IFS=: read -r prog np mode <<<"$t"
    name=${t//:/_}
    cmd=("$build/tests/$prog")
    [ -n "$np" ] && cmd=(mpirun -np "$np" -x CHORUS_CUDA_ASYNC="$([ "$mode" = blocking ] &&
        echo 0 || echo 1)" "${cmd[@]}")
    t0=$SECONDS
    timeout 300 "${cmd[@]}" >"$OUT/$name.log" 2>&1
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

# all_reduce_perf on device buffers at 2 and 4 processes sharing the GPU (staged calls).
t0=$SECONDS
log=$OUT/all_reduce_perf_device.log
: >"$log"
for run in 2:1 4:1 2:0; do
    np=${run%:*} async=${run#*:}
    echo "# $np ranks, CHORUS_CUDA_ASYNC=$async" >>"$log"
    if timeout 300 mpirun -np "$np" -x CHORUS_CUDA_ASYNC="$async" "$build/perftests/all_reduce_perf" \
        --device cuda -b 8 -e 64M -f 8 -n 20 -w 5 >>"$log" 2>&1; then
        say "all_reduce_perf --device cuda, $np ranks, CHORUS_CUDA_ASYNC=$async:" \
            "$(grep 'Avg bus bandwidth' "$log" | tail -1)"
    else
        say "all_reduce_perf --device cuda, $np ranks, CHORUS_CUDA_ASYNC=$async: FAILED" \
            "($(tail -1 "$log"))"
        status=1
    fi
done
say "    ($((SECONDS - t0)) s; the tables are in all_reduce_perf_device.log)"

say "not built yet (issue 8): device executor and cuda_p2p (device buffers are staged through" \
    "pinned host memory; calls return at once, ordered by stream memory operations)"
say "== gpu-check: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
