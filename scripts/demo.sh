#!/usr/bin/env bash
# demo.sh [TRAIN_ARGS...]: install dependencies, build, and train on Fashion-MNIST with chorus-train
# on 4 local ranks for 3 epochs (SyncBN on, every sync through Chorus), then draw the loss and
# accuracy curves. Extra arguments go to chorus-train (e.g. `scripts/demo.sh --pitfall local-bn`).
# BUILD_DIR picks the build directory (build/).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

build=${BUILD_DIR:-build}
cmake -S . -B "$build"
cmake --build "$build" -j"$(nproc)"
train=$build/trainer/chorus-train
if [ ! -x "$train" ]; then
    echo "demo.sh: $train was not built (it needs OpenBLAS, zlib and MPI: see the cmake output)" >&2
    exit 1
fi

out=$build/demo
mkdir -p "$out"
echo
echo "+ mpirun -np 4 --oversubscribe $train --epochs 3 --sync-bn --metrics $out/metrics.csv $*"
mpirun -np 4 --oversubscribe "$train" --epochs 3 --sync-bn --metrics "$out/metrics.csv" "$@"
echo
if png=$(trainer/plot "$out/metrics.csv" "$out/metrics.png"); then
    echo "plot: $png (loss and accuracy per epoch; data in $out/metrics.csv)"
else
    echo "plot: not drawn (see above); the numbers are in $out/metrics.csv"
fi
