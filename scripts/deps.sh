#!/usr/bin/env bash
# deps.sh: install what building, testing, the demo and the trainer need on Debian 12.
#
# Idempotent: when every package is installed it only asks dpkg and returns. Otherwise it runs
# apt-get update once and installs the missing ones, as root or through sudo.
set -euo pipefail

packages=(
    build-essential cmake pkg-config  # toolchain
    libhwloc-dev                      # topology (required by the library)
    libibverbs-dev                    # verbs headers for the IB plugin (libibverbs is dlopen'd)
    openmpi-bin libopenmpi-dev        # mpirun, chorus_mpi.h, perftests' MPI comparison
    libgloo-dev                       # perftests' --compare gloo (PyTorch's CPU backend)
    libopenblas-dev zlib1g-dev        # trainer: matrix products, gzip'd IDX files
    gnuplot-nox                       # trainer/plot: loss and accuracy curves as PNG
    iproute2                          # `ip`, used by the interface-selection tests
    clang-format                      # formatting check in scripts/test.sh
    clang libclang-rt-14-dev          # scripts/fuzz.sh: libFuzzer and the sanitizers' runtimes
)
optional=(dataset-fashion-mnist) # trainer data; skipped with a note where the archive lacks it

installed() {
    [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# available PKG: the archive (as apt knows it now) has an installable candidate for PKG.
available() {
    local policy
    policy=$(apt-cache policy "$1" 2>/dev/null) || return 1
    [[ $policy == *"Candidate: "[!\(]* ]]
}

missing=()
for p in "${packages[@]}"; do
    installed "$p" || missing+=("$p")
done
have_lists() {
    compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null
}
for p in "${optional[@]}"; do
    # When apt's package lists exist and lack it, it is not missing: no update on every run.
    if ! installed "$p" && ! { have_lists && ! available "$p"; }; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
        echo "deps.sh: need root or sudo to install: ${missing[*]}" >&2
        exit 1
    }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
echo "deps.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq

want=()
for p in "${missing[@]}"; do
    if [[ " ${optional[*]} " == *" $p "* ]] && ! available "$p"; then
        echo "deps.sh: note: $p is not in the package archive; skipping it" >&2
        continue
    fi
    want+=("$p")
done
[ ${#want[@]} -eq 0 ] && exit 0
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}"
