#!/usr/bin/env bash
# sanitize.sh [asan|tsan|all] [CTEST_ARGS...]: build with sanitizers and run the tests they watch.
#
#   asan  build-asan (CHORUS_SANITIZE=address,undefined): the multi-process suite, one test per
#         way of starting and joining ranks and per transport: mpirun (coll, p2p, perftests),
#         chorusCommInitEnv (env_init, the README example), forked ranks (boot_flood's hostile
#         bootstrap traffic, two jobs at once), simulated hosts (CHORUS_HOSTID: shm inside a host,
#         net across), network namespaces, the socket net plugin, and lifecycle, abort and
#         argument checks.
#   tsan  build-tsan (CHORUS_SANITIZE=thread): the tests whose ranks, progress threads, streams,
#         proxy threads and aborts share one process, where every cross-thread access is in
#         sight of the tool: ranks of one process share one mapping of each shm FIFO and window
#         (transports/shm.c), so a flag's release and its acquire are the same word to it (with
#         a mapping per rank it saw neither the FIFO and window protocols nor zero-copy's in-place
#         reads; a relaxed ready flag or FIFO tail went unreported).
#   all   both (the default).
#
# Each stage builds only the targets its tests run (read from ctest's test commands), then runs
# them with ctest. Every sanitizer writes its reports to files under the build tree (log_path),
# not only to stderr: a report from a process whose exit status a driver ignores, or from a test
# that passes anyway, still fails the stage. Extra arguments go to ctest (e.g. -R coll_mpi_4 -V);
# they replace the stage's own selection when they contain -R, -L, -E or -LE (the targets built
# are then those of the tests they select).
#
# The selections are a budget: scripts/test.sh runs both stages in CI after the plain ctest, and
# on 2 cores each takes about 2 minutes, build included (up to twice that while other work shares
# the machine). Left out, and why:
#   coll_mpi_{1,2,4..7}, coll_threads_*   the same matrix as coll_mpi_{3,8} / coll_threads_{3,8}
#                                         on other rank counts: more minutes, no new code
#   coll_large_*, multihost_2x2_large     2^20+3 elements: the same slicing code as the small
#                                         counts with 64-byte slots, at 1-4 minutes each here
#   multihost_4x2_*, multihost_2x2_ring   more hosts / another algorithm over the same transports
#   netns_* but netns_transports          the same runs as multihost over veth links
#   perf_* but one, trainer_app_*, trainer_nn_*   the public API as coll_* already drives it;
#                                         chorus-train under ASan takes 70 s a case
#   reduce_unit, topo, tuning, graph, device_ptr_refused, env_table_in_readme, logging,
#   socket_ifname, install_consumer       single-process or build checks, not the suite's paths
#   faults_kill_*, faults_sigstop_*, faults_init_*, boot_flood_lowfd, two_jobs_shm, hygiene_*,
#   shm_small, shm_sigkill                timing-bound or minutes-long fault and resource tests
#                                         (the kill/sigstop bounds are wall-clock)
#   fuzz_replay_*                         already run under ASan+UBSan in the plain build
#   cuda_memops, cuda_device_ptr, cuda_coll_*, cuda_stage_4, cuda_p2p_4, cuda_p2p_blocking_2
#                                         a GPU's (scripts/gpu-check.sh), or cuda_stage_2 /
#                                         cuda_p2p_2 again at 4 ranks or waiting for the stream
#   tsan: the mpirun tests (one rank per process: the tool sees no other rank's accesses), but
#         multihost_transports_2x2 for the net proxy thread
#   tsan: coll_zcopy_{oneshot_even,twoshot_all,vote_even}_threads_3   the same paths as the
#                                         siblings the stage runs (every rank's buffers or even
#                                         ranks' in place)
#
# Environment: ASAN_BUILD_DIR / TSAN_BUILD_DIR (default build-asan / build-tsan),
# CTEST_PARALLEL_LEVEL (default 2), SANITIZE_JOBS (build parallelism, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

stage=${1:-all}
[ $# -gt 0 ] && shift
case $stage in
asan | tsan | all) ;;
*)
    echo "usage: $0 [asan|tsan|all] [CTEST_ARGS...]" >&2
    exit 2
    ;;
esac
user_select=0
for a in "$@"; do
    case $a in
    -R | -L | -E | -LE | --tests-regex | --label-regex | --exclude-regex) user_select=1 ;;
    esac
done

lsan_supp=$PWD/tests/lsan.supp
tsan_supp=$PWD/tests/tsan.supp
jobs=${SANITIZE_JOBS:-$(nproc)}

# The multi-process suite under ASan+UBSan.
asan_tests=(
    coll_mpi_3 coll_mpi_8 coll_threads_8 p2p_mpi_4 multihost_2x2_auto multihost_2x2_tree env_init
    readme_example_3ranks perf_all_reduce_stream_group netns_transports net_socket boot_flood
    boot_flood_lowfd_rank0 two_jobs_net lifecycle invalid_args uniqueid p2p_group_mixed_threads_3
    stream_threads_3 coll_zcopy_vote_all_mpi_4 shm_segment coll_runahead_mpi_4
)
# Device buffers (fake driver: staged, and GPU to GPU over cuda_p2p) exist only in CUDA builds:
# where nvcc is found.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    asan_tests+=(cuda_stage_2 cuda_p2p_2)
fi
# The IB plugin on the verbs emulator, where the verbs headers are (libibverbs-dev, deps.sh).
have_verbs=0
[ -f /usr/include/infiniband/verbs.h ] && have_verbs=1
[ $have_verbs = 1 ] && asan_tests+=(net_ib softverbs_rc multihost_ib_2x2_auto)
# Progress and abort under TSan: ranks as threads in one process, plus the threads every rank
# process runs (bootstrap root under a flood, net proxy). faults_abort_* abort from another thread
# while calls block, start or loop; they run alone (RUN_SERIAL).
tsan_tests=(
    p2p_threads_4 p2p_group_mixed_threads_3 stream_threads_3 coll_threads_3 coll_threads_8
    split_threads_8 lifecycle invalid_args uniqueid net_socket multihost_transports_2x2 boot_flood
    two_jobs_net faults_abort_blocked faults_abort_race faults_abort_idle faults_abort_busy
    coll_zcopy_oneshot_all_threads_3 coll_zcopy_twoshot_even_threads_3
    coll_zcopy_vote_all_threads_3 coll_stream_zcopy_oneshot_threads_3 coll_runahead_threads_4
)
[ $have_verbs = 1 ] && tsan_tests+=(net_ib softverbs_rc)

regex() {
    local IFS='|'
    echo "^($*)\$"
}

# check_selection DIR NAME...: every name is a test of DIR (a renamed test must not silently
# drop out of the stage).
check_selection() {
    local dir=$1 t ok=0
    shift
    local have
    have=$(ctest --test-dir "$dir" -N | sed -n 's/^ *Test *#[0-9]*: //p')
    for t in "$@"; do
        if ! grep -qxF "$t" <<<"$have"; then
            echo "sanitize: selected test $t is not declared in $dir" >&2
            ok=1
        fi
    done
    return $ok
}

# targets_of DIR CTEST_SELECTION...: the build targets the selected tests run, i.e. every path
# under DIR that ctest -N -V prints for them (their commands and arguments, or "Could not find
# executable" for a program not built yet) whose name is a target.
targets_of() {
    local dir=$1 abs
    shift
    abs=$(cd "$dir" && pwd)
    LC_ALL=C comm -12 \
        <(ctest --test-dir "$dir" -N -V "$@" 2>&1 | grep -o "$abs/[^\" ]*" | xargs -r -n1 basename |
            LC_ALL=C sort -u) \
        <(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p' |
            LC_ALL=C sort -u)
}

# TSan maps its shadow memory at fixed addresses; with more mmap randomization than the tool
# expects (vm.mmap_rnd_bits > 28) a library may land there ("FATAL: ThreadSanitizer: unexpected
# memory mapping"). Then run without address randomization (setarch -R, inherited by every
# child) rather than change the machine's setting.
tsan_prefix=()
tsan_mmap_setup() {
    local bits
    bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)
    if [ "$bits" -gt 28 ]; then
        tsan_prefix=(setarch "$(uname -m)" -R)
        echo "tsan: vm.mmap_rnd_bits=$bits; running under setarch -R"
    fi
}

# run_stage NAME DIR SANITIZE TEST...: configure, build, run, then collect the report files.
run_stage() {
    local name=$1 dir=$2 san=$3 logs rc=0 t0=$SECONDS
    shift 3
    local tests=("$@") sel
    echo "== sanitize $name: build $dir (CHORUS_SANITIZE=$san)"
    # Without -Werror: gcc's warnings on instrumented code include false ones (-Wmaybe-uninitialized
    # on a buffer written before the call it flags); the plain build in test.sh enforces warnings.
    # CUDA as in the plain build (AUTO): no stage selects a target that needs the CUDA runtime;
    # cuda_stage_2 and cuda_p2p_2 run the library's device paths against a fake driver.
    mkdir -p "$dir"
    cmake -S . -B "$dir" -DCHORUS_WERROR=OFF -DCHORUS_SANITIZE="$san" \
        >"$dir/sanitize-configure.log" 2>&1 || {
        cat "$dir/sanitize-configure.log"
        echo "sanitize $name: configure FAILED" >&2
        return 1
    }
    if [ $user_select = 1 ]; then
        sel=("${ctest_args[@]}")
    else
        sel=(-R "$(regex "${tests[@]}")")
        check_selection "$dir" "${tests[@]}" || return 1
    fi
    local targets=()
    mapfile -t targets < <(targets_of "$dir" "${sel[@]}")
    [ ${#targets[@]} -gt 0 ] || targets=(all)
    echo "   targets: ${targets[*]}"
    cmake --build "$dir" -j"$jobs" --target "${targets[@]}" >"$dir/sanitize-build.log" 2>&1 || {
        tail -50 "$dir/sanitize-build.log"
        echo "sanitize $name: build FAILED ($dir/sanitize-build.log)" >&2
        return 1
    }
    local t_build=$((SECONDS - t0))
    echo "   built in $t_build s"
    logs=$PWD/$dir/sanitizer-logs
    rm -rf "$logs"
    mkdir -p "$logs"
    [ $user_select = 1 ] && sel=()
    local t1=$SECONDS
    case $name in
    asan)
        # fast_unwind_on_malloc=0: full stacks at every allocation, so LeakSanitizer can tell Open
        # MPI's allocations (suppressed, tests/lsan.supp) from ours.
        local asan=log_path=$logs/asan:detect_leaks=1:fast_unwind_on_malloc=0
        asan+=:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1
        ASAN_OPTIONS=$asan LSAN_OPTIONS=suppressions=$lsan_supp:print_suppressions=0 \
            UBSAN_OPTIONS=log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1 \
            ctest --test-dir "$dir" --output-on-failure --no-tests=error \
            -j"${CTEST_PARALLEL_LEVEL:-2}" "${sel[@]}" "${ctest_args[@]}" || rc=1
        ;;
    tsan)
        # 64 KiB FIFOs (tests that set their own sizes keep them): the synchronization is the same
        # at any size, and under TSan zeroing and copying 4 MiB FIFOs made init slow enough for
        # lifecycle to time out and for invalid_args' 300 ms init deadline to pass on a busy
        # machine.
        local tsan=log_path=$logs/tsan:halt_on_error=0:second_deadlock_stack=1
        tsan+=:suppressions=$tsan_supp
        CHORUS_BUFFSIZE=64K CHORUS_P2P_BUFFSIZE=64K TSAN_OPTIONS=$tsan \
            "${tsan_prefix[@]}" ctest --test-dir "$dir" --output-on-failure --no-tests=error \
            -j"${CTEST_PARALLEL_LEVEL:-2}" "${sel[@]}" "${ctest_args[@]}" || rc=1
        ;;
    esac
    if compgen -G "$logs/*" >/dev/null; then
        echo "== sanitize $name: reports ($logs)"
        for f in "$logs"/*; do
            echo "---- $f"
            cat "$f"
        done
        rc=1
    fi
    echo "   sanitize $name: build $t_build s, tests $((SECONDS - t1)) s;" \
        "stage $([ $rc = 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
    return $rc
}

ctest_args=("$@")
status=0
if [ "$stage" = asan ] || [ "$stage" = all ]; then
    run_stage asan "${ASAN_BUILD_DIR:-build-asan}" address,undefined "${asan_tests[@]}" ||
        status=1
fi
if [ "$stage" = tsan ] || [ "$stage" = all ]; then
    tsan_mmap_setup
    run_stage tsan "${TSAN_BUILD_DIR:-build-tsan}" thread "${tsan_tests[@]}" || status=1
fi
exit $status
