# Functional tests of the public API on one CPU host (ranks as threads, processes or MPI ranks):
#   p2p_threads_N, p2p_mpi_4   grouped send/recv patterns, all-to-all, single-thread groups
#   p2p_timeout_threads_2      a send/recv whose peer never posts the match: chorusTimeout
#   stream_threads_N           host streams: queued calls run in order, query/sync/destroy
#   invalid_args               the invalid-argument table, aborted communicators, malformed env
#   check_args                 CHORUS_CHECK_ARGS=1: calls that differ across ranks refused on all
#   split_threads_8            chorusCommSplit: colors, keys, NOCOLOR, split of a split
#   env_init                   chorusCommInitEnv in separate processes (CHORUS_* and torchrun vars)
#   uniqueid                   distinct ids; the root refuses rogue connections and keeps serving
#   lifecycle                  init/destroy loop without leaks, abort, finalize, queries, the
#                              exec lock and one communicator called from four threads
#   wait_gate                  the gate of one-host waits: when it yields the core, and that a
#                              gated wait still sleeps
#   shm_segment                ranks of one process share one mapping of each shm segment, counted
#   p2p_group_mixed_threads_3  a group {send, all-reduce or all-to-all, recv} (fails until
#                              enqueue.c runs a group's sends and receives as one progress loop
#                              around collectives); the all-to-all in that loop
#   p2p_group_mixed_direct_threads_3  the same with the all-to-all through the direct windows, a
#                              collective before the loop (CHORUS_ALLTOALL_DIRECT_MAX)
#   lifecycle_asan             lifecycle under AddressSanitizer (fails until an aborted call stops
#                              touching the communicator that chorusCommAbort frees)
# Each prints what it proves and PASS/FAIL; every one runs in well under 30 s on two cores.
# What they share (FAIL/CHECK_OK, PASS lines, byte patterns, thread ranks) is support/harness.c,
# the static library chorus_test_harness that every one links.

add_library(chorus_test_harness STATIC support/harness.c)
target_include_directories(chorus_test_harness PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(chorus_test_harness PUBLIC chorus_internal Threads::Threads)

foreach(t p2p stream invalid split env_init uniqueid lifecycle wait_gate wait_balance
        shm_segment check_args)
    add_executable(test_${t} test_${t}.c)
    target_link_libraries(test_${t} chorus_test_harness)
endforeach()

# All-to-all through the send/recv loop here (CHORUS_ALLTOALL_DIRECT_MAX=0: by default it takes
# the windows where ranks outnumber cores, which the coll_oneshot tests cover).
foreach(n 1 2 3 4 5 6 7 8)
    chorus_add_test(NAME p2p_threads_${n} COMMAND test_p2p ${n} TIMEOUT 120 LABELS functional
        ENV CHORUS_ALLTOALL_DIRECT_MAX=0)
endforeach()
# A group {send, all-reduce or all-to-all, recv}: the send and its receive must progress together.
# A receive and a send whose peer never posts the match end in chorusTimeout, in bounded time.
chorus_add_test(NAME p2p_timeout_threads_2 COMMAND test_p2p 2 timeout TIMEOUT 60 LABELS functional)
chorus_add_test(NAME p2p_group_mixed_threads_3 COMMAND test_p2p 3 mixed TIMEOUT 120
    LABELS functional ENV CHORUS_ALLTOALL_DIRECT_MAX=0)
chorus_add_test(NAME p2p_group_mixed_direct_threads_3 COMMAND test_p2p 3 mixed TIMEOUT 120
    LABELS functional ENV CHORUS_ALLTOALL_DIRECT_MAX=1G)
if(MPI_C_FOUND)
    add_executable(test_p2p_mpi test_p2p.c)
    target_compile_definitions(test_p2p_mpi PRIVATE TEST_P2P_MPI=1)
    target_link_libraries(test_p2p_mpi chorus_test_harness MPI::MPI_C)
    chorus_add_test(NAME p2p_mpi_4
        COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4
                $<TARGET_FILE:test_p2p_mpi>
        TIMEOUT 120 LABELS functional mpi)
endif()

foreach(n 3 4)
    chorus_add_test(NAME stream_threads_${n} COMMAND test_stream ${n} TIMEOUT 120 LABELS functional)
endforeach()

chorus_add_test(NAME invalid_args COMMAND test_invalid TIMEOUT 120 LABELS functional)
chorus_add_test(NAME check_args COMMAND test_check_args TIMEOUT 120 LABELS functional)

chorus_add_test(NAME split_threads_8 COMMAND test_split TIMEOUT 120 LABELS functional)

# env_init.sh starts one process per rank (no MPI) and checks every one.
chorus_add_test(NAME env_init
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/env_init.sh $<TARGET_FILE:test_env_init>
    TIMEOUT 120 LABELS functional)

chorus_add_test(NAME uniqueid COMMAND test_uniqueid TIMEOUT 120 LABELS functional)

chorus_add_test(NAME lifecycle COMMAND test_lifecycle TIMEOUT 120 LABELS functional)

chorus_add_test(NAME wait_gate COMMAND test_wait_gate TIMEOUT 60 LABELS functional)
chorus_add_test(NAME wait_balance COMMAND test_wait_balance TIMEOUT 120 LABELS functional)
# Alone: where other tasks run, ranks leave their placement to the kernel (and the test SKIPs).
set_tests_properties(wait_balance PROPERTIES RUN_SERIAL TRUE)

chorus_add_test(NAME shm_segment COMMAND test_shm_segment TIMEOUT 60 LABELS functional)

# lifecycle_asan: test_lifecycle compiled together with the library's sources under
# AddressSanitizer, so a use-after-free between chorusCommAbort and the thread of the call it
# aborts fails the test instead of passing silently. Only where the compiler has ASan, and not
# when the whole build already uses a sanitizer. The harness is compiled in too (not linked as
# chorus_test_harness, which would bring a second, uninstrumented copy of the library).
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=address)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=address)
check_c_source_compiles("int main(void) { return 0; }" CHORUS_TEST_HAVE_ASAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(CHORUS_TEST_HAVE_ASAN AND NOT CMAKE_C_FLAGS MATCHES "-fsanitize")
    get_target_property(_chorus_lib_sources chorus_obj SOURCES)
    add_executable(test_lifecycle_asan test_lifecycle.c support/harness.c ${_chorus_lib_sources})
    if(TARGET chorus_cuda_fatbin) # the kernels' generated source is among them
        add_dependencies(test_lifecycle_asan chorus_cuda_fatbin)
    endif()
    target_compile_options(test_lifecycle_asan PRIVATE -fsanitize=address -fno-omit-frame-pointer)
    target_link_options(test_lifecycle_asan PRIVATE -fsanitize=address)
    target_compile_definitions(test_lifecycle_asan PRIVATE
        $<TARGET_PROPERTY:chorus_obj,COMPILE_DEFINITIONS>)
    target_include_directories(test_lifecycle_asan PRIVATE
        $<TARGET_PROPERTY:chorus_obj,INCLUDE_DIRECTORIES> ${CMAKE_CURRENT_SOURCE_DIR}/support)
    target_link_libraries(test_lifecycle_asan PRIVATE
        $<TARGET_PROPERTY:chorus_obj,INTERFACE_LINK_LIBRARIES> ${CMAKE_DL_LIBS})
    chorus_add_test(NAME lifecycle_asan COMMAND test_lifecycle_asan TIMEOUT 120
        ENV ASAN_OPTIONS=detect_leaks=0 LABELS functional asan)
endif()
