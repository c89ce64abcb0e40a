#!/usr/bin/env bash
# demo.sh [PERF_ARGS...]: install dependencies, build, and run all_reduce_perf on 4 local ranks
# from 8 B to 64 MiB. Extra arguments go to all_reduce_perf (e.g. `scripts/demo.sh -d double`).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

build=${BUILD_DIR:-build}
cmake -S . -B "$build"
cmake --build "$build" -j"$(nproc)"
mpirun -np 4 --oversubscribe "$build/perftests/all_reduce_perf" -b 8 -e 64M -f 4 "$@"
