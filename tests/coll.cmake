# The collectives' correctness matrix (tests/coll_matrix.c): every rank count 1..8, as threads
# (chorusCommInitAll) and as processes (mpirun), with 64-byte FIFO slots so small buffers cross
# many slices, and 1-3 channels. The 2^20+3 count runs with the default slot size.
add_executable(coll_matrix_threads coll_matrix.c)
target_link_libraries(coll_matrix_threads chorus_internal)
if(MPI_C_FOUND)
  add_executable(coll_matrix_mpi coll_matrix.c)
  target_compile_definitions(coll_matrix_mpi PRIVATE WITH_MPI)
  target_link_libraries(coll_matrix_mpi chorus_internal MPI::MPI_C)
endif()

# The large count from 6 ranks up is a quarter (262147: still 1 MiB of floats, two window
# buffers and two FIFO slots of the defaults; 2-5 ranks run the full count): 56 and 78 s at
# 1048579 for 6 and 7 thread ranks under `.ci/run` on the AMD VM of 2026-12-06, whose whole run
# then took 29.6 minutes; 4-7 s at 262147. 8 ranks followed when the run came back to 25-27
# minutes: 54 s each, threads and processes, in `.ci/run`; threads alone 29.8 s against 6.4.
foreach(n RANGE 1 8)
  math(EXPR nch "${n} % 3 + 1")
  set(small_env CHORUS_BUFFSIZE=512 CHORUS_NCHANNELS=${nch})
  set(large 1048579)
  if(n GREATER_EQUAL 6)
    set(large 262147)
  endif()
  chorus_add_test(NAME coll_threads_${n} TIMEOUT 300
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads ${n} --counts 0,1,7,1031
    ENV ${small_env})
  chorus_add_test(NAME coll_large_threads_${n} TIMEOUT 600
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads ${n} --counts ${large} --quick-large
    ENV CHORUS_NCHANNELS=${nch})
  if(MPI_C_FOUND)
    chorus_add_test(NAME coll_mpi_${n} TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              -x CHORUS_BUFFSIZE=512 -x CHORUS_NCHANNELS=${nch}
              $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,1031)
  endif()
endforeach()
if(MPI_C_FOUND)
  foreach(n 2 3 5 8)
    set(large 1048579)
    if(n GREATER_EQUAL 6)
      set(large 262147)
    endif()
    chorus_add_test(NAME coll_large_mpi_${n} TIMEOUT 600
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:coll_matrix_mpi> --counts ${large} --quick-large)
  endforeach()
endif()

# More ranks on one host than the communicator keeps its window pointers for inline
# (WIN_INLINE_RANKS, 8; src/comm.h): 12 thread ranks, one-shot and two-shot forced, so the
# direct windows' per-rank arrays come from the heap.
foreach(algo oneshot twoshot)
  chorus_add_test(NAME coll_${algo}_threads_12 TIMEOUT 300
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 12 --counts 0,1,7,1031
    ENV CHORUS_ALGO=${algo})
endforeach()

# Writers running ahead of readers on the direct algorithms (tests/test_runahead.c): broadcast,
# reduce and all-reduce cycling through LL words, slotted buffers of 4 KiB to 256 KiB, the whole
# buffers and two pieces; with 64 KiB buffers too (slots of 4 KiB and 8 KiB, whole buffers from
# 40000 bytes). Threads, and processes where ranks outnumber the cores.
add_executable(test_runahead test_runahead.c)
target_link_libraries(test_runahead chorus_test_harness)
foreach(n 2 3 4)
  chorus_add_test(NAME coll_runahead_threads_${n} TIMEOUT 300
    COMMAND $<TARGET_FILE:test_runahead> ${n} ENV CHORUS_ALGO=oneshot)
endforeach()
chorus_add_test(NAME coll_runahead_buff64k_threads_5 TIMEOUT 300
  COMMAND $<TARGET_FILE:test_runahead> 5
  ENV CHORUS_ALGO=oneshot CHORUS_DIRECT_BUFFSIZE=65536)
# The tuner's picks (direct and ring calls mixed), and buffers of no power of two (100 KiB).
chorus_add_test(NAME coll_runahead_tuned_threads_4 TIMEOUT 300
  COMMAND $<TARGET_FILE:test_runahead> 4)
chorus_add_test(NAME coll_runahead_buff100k_threads_3 TIMEOUT 300
  COMMAND $<TARGET_FILE:test_runahead> 3
  ENV CHORUS_ALGO=oneshot CHORUS_DIRECT_BUFFSIZE=102400)
if(MPI_C_FOUND)
  add_executable(test_runahead_mpi test_runahead.c)
  target_compile_definitions(test_runahead_mpi PRIVATE TEST_RUNAHEAD_MPI=1)
  target_link_libraries(test_runahead_mpi chorus_test_harness MPI::MPI_C)
  chorus_add_test(NAME coll_runahead_mpi_4 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4
            -x CHORUS_ALGO=oneshot $<TARGET_FILE:test_runahead_mpi>)
endif()

# The direct algorithms (algorithms/direct.c: node-local windows) forced with CHORUS_ALGO, with
# 4 KiB window buffers so the larger counts cross many pieces and both buffers; oneshot also
# serves broadcast, reduce, all-gather and reduce-scatter, twoshot only all-reduce (the others
# then run the ring). 61 elements of 1 and 2 bytes go as LL words (up to 128 bytes; 61 bytes of
# int8 end in a part word), as does the last piece of 4200 int8 elements (after full buffers).
# 28 four-byte elements fill the two tagged lines that all-reduce, all-gather and reduce-scatter
# pieces go in (LINES_MAX_NBYTES: 112 bytes; eight-byte ones, 224 bytes, take the buffer).
# The large count runs with the default buffers. All-to-all takes the windows too
# (CHORUS_ALLTOALL_DIRECT_MAX; it has no CHORUS_ALGO name, and by default only where ranks
# outnumber cores).
foreach(algo oneshot twoshot)
  foreach(n 2 3 5 8)
    chorus_add_test(NAME coll_${algo}_threads_${n} TIMEOUT 300
      COMMAND $<TARGET_FILE:coll_matrix_threads> --threads ${n} --counts 0,1,7,28,61,1031,4200
      ENV CHORUS_ALGO=${algo} CHORUS_DIRECT_BUFFSIZE=4096 CHORUS_ALLTOALL_DIRECT_MAX=1G)
  endforeach()
  chorus_add_test(NAME coll_${algo}_large_threads_4 TIMEOUT 600
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 4 --counts 1048579 --quick-large
    ENV CHORUS_ALGO=${algo} CHORUS_ALLTOALL_DIRECT_MAX=1G)
  if(MPI_C_FOUND)
    foreach(n 2 4)
      chorus_add_test(NAME coll_${algo}_mpi_${n} TIMEOUT 300
        COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
                -x CHORUS_ALGO=${algo} -x CHORUS_DIRECT_BUFFSIZE=4096
                -x CHORUS_ALLTOALL_DIRECT_MAX=1G
                $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,28,61,1031,4200)
    endforeach()
  endif()
endforeach()

# Two ranks with different CHORUS_DIRECT_BUFFSIZE: a warning and the ring, not a SIGBUS.
if(MPI_C_FOUND)
  chorus_add_test(NAME coll_window_mismatch_mpi_2 TIMEOUT 300
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/window_mismatch.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,1031)
  # Two ranks with different channels, CHORUS_ALGO, CHORUS_ZCOPY_ALLREDUCE_MIN or
  # CHORUS_ALLTOALL_DIRECT_MAX, or an invalid CHORUS_PROTO on one: init fails at once on both,
  # naming the variable (it used to wait for CHORUS_TIMEOUT_MS); equal settings spelt
  # differently run. 8 s here.
  chorus_add_test(NAME settings_mismatch_mpi_2 TIMEOUT 300
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/settings_mismatch.sh ${MPIEXEC_EXECUTABLE}
            $<TARGET_FILE:coll_matrix_mpi>)
endif()

# Zero-copy (direct.c: chorusMemAlloc inputs read in place by the peers) forced with CHORUS_ALGO,
# 64 KiB window buffers so 140000 elements cross many pieces (zero-copy from 512 KiB here,
# CHORUS_ZCOPY_MIN and CHORUS_ZCOPY_BROADCAST_MIN: the types of 4 bytes and more; all-reduces
# copy, outside the vote below); buffers from chorusMemAlloc on every rank (all) or on even
# ranks only (even: both kinds in one call). Threads read each other's memory by address,
# processes map it through /proc/<pid>/fd; each run fails unless some rank read a peer's buffer
# in place.
# All-to-all too (CHORUS_ALLTOALL_DIRECT_MAX).
foreach(algo oneshot twoshot)
  foreach(mode all even)
    chorus_add_test(NAME coll_zcopy_${algo}_${mode}_threads_3 TIMEOUT 300
      COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,140000 --memalloc ${mode}
      ENV CHORUS_ALGO=${algo} CHORUS_DIRECT_BUFFSIZE=65536 CHORUS_ALLTOALL_DIRECT_MAX=1G
          CHORUS_ZCOPY_MIN=512K CHORUS_ZCOPY_BROADCAST_MIN=512K)
    if(MPI_C_FOUND)
      chorus_add_test(NAME coll_zcopy_${algo}_${mode}_mpi_4 TIMEOUT 300
        COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4
                -x CHORUS_ALGO=${algo} -x CHORUS_DIRECT_BUFFSIZE=65536
                -x CHORUS_ALLTOALL_DIRECT_MAX=1G -x CHORUS_ZCOPY_MIN=512K
                -x CHORUS_ZCOPY_BROADCAST_MIN=512K
                $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --memalloc ${mode})
    endif()
  endforeach()
endforeach()

# Cross-memory attach (direct.c: all-gathers from CHORUS_CMA_MIN a rank, broadcasts from 128 KiB
# where ranks do not outnumber cores, move data between the ranks' own buffers with
# process_vm_readv and process_vm_writev; ranks of one process copy by address): malloc'd buffers
# as processes, 2 ranks (all-gather and
# broadcast) and 3 (all-gather; CHORUS_CMA_MIN lowered to 4 KiB so 1031 elements of 4 bytes and
# more take it too); chorusMemAlloc on even ranks (even: zero-copy refs and addresses in one call);
# threads; and CHORUS_CMA_MIN=0, where none may. Each fails unless some rank used it (on), or
# if one did (off); --cma-writes allgather,broadcast (2 ranks, processes and threads): unless
# some all-gather wrote into the others' outputs, and some in-place broadcast's root its share.
# CHORUS_CMA_MIN set keeps it on (unset, window.c times it against the window's
# copies and it is off where it loses, as on the AMD VM of 2026-12-06); coll_cma_auto_mpi_* leave
# it unset, with CHORUS_CMA_ADAPT=0 (all-gathers keep the setup's answer), and fail unless every
# rank agreed, and used it exactly when on. coll_cma_adapt_*: all-gathers choose their path at
# run time (algorithms/direct_adapt.c), CHORUS_CMA_ADAPT=2 turning every size the other way at
# every chance, with 60 all-gathers back to back after the matrix; each fails unless every rank
# took up the same plans (more than one) and used cross-memory attach, and every result is
# right (with plans published a call later than they hold, they were not: 111-121 wrong checks).
if(MPI_C_FOUND)
  chorus_add_test(NAME coll_cma_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 -x CHORUS_ALGO=oneshot
            -x CHORUS_CMA_MIN=16384
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1031,140000 --cma on
            --cma-writes allgather,broadcast)
  foreach(np 2 3)
    chorus_add_test(NAME coll_cma_auto_mpi_${np} TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${np}
              -x CHORUS_ALGO=oneshot -x CHORUS_CMA_ADAPT=0
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma auto)
    chorus_add_test(NAME coll_cma_adapt_mpi_${np} TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${np}
              -x CHORUS_ALGO=oneshot -x CHORUS_CMA_ADAPT=2
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma adapt)
  endforeach()
  chorus_add_test(NAME coll_cma_min4k_mpi_3 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 3 -x CHORUS_ALGO=oneshot
            -x CHORUS_CMA_MIN=4096
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1031,140000 --cma on)
  chorus_add_test(NAME coll_cma_memalloc_even_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 -x CHORUS_ALGO=oneshot
            -x CHORUS_CMA_MIN=16384 -x CHORUS_ZCOPY_MIN=512K -x CHORUS_ZCOPY_BROADCAST_MIN=512K
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --memalloc even --cma on)
  chorus_add_test(NAME coll_cma_off_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 -x CHORUS_ALGO=oneshot
            -x CHORUS_CMA_MIN=0
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma off)
endif()
# The setup's timing made up (CHORUS_CMA_TIMED_PCT; CHORUS_CMA_ADAPT=0, so the setup decides for
# all-gathers): the window's piece at 75% of the attach's leaves all-gathers on the window and
# broadcasts and two-shot all-reduces on the attach (src/window.c CMA_BEARABLE_WIN_PCT); at 25%,
# no call takes it. With the run-time choice on (CHORUS_CMA_ADAPT=1), at 75% all-gathers of
# 64 KiB a rank and more start on the attach (140000 elements), smaller ones on the window (6000
# elements: 12-48 KB a rank; algo.h DIRECT_ADAPT_TIMED_CLASSES). 2 processes (ranks that do not outnumber the cores).
if(MPI_C_FOUND)
  foreach(algo oneshot twoshot)
    set(wrote broadcast)
    if(algo STREQUAL "twoshot")
      set(wrote allreduce)
    endif()
    chorus_add_test(NAME coll_cma_bearable_${algo}_mpi_2 TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
              -x CHORUS_CMA_TIMED_PCT=75 -x CHORUS_CMA_ADAPT=0 -x CHORUS_ALGO=${algo}
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma-writes ${wrote}
              --cma-no-writes allgather)
  endforeach()
  chorus_add_test(NAME coll_cma_unbearable_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            -x CHORUS_CMA_TIMED_PCT=25 -x CHORUS_CMA_ADAPT=0 -x CHORUS_ALGO=oneshot
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma off)
  chorus_add_test(NAME coll_cma_start_large_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            -x CHORUS_CMA_TIMED_PCT=75 -x CHORUS_ALGO=oneshot
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --cma-writes allgather)
  chorus_add_test(NAME coll_cma_start_small_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            -x CHORUS_CMA_TIMED_PCT=75 -x CHORUS_ALGO=oneshot
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,6000 --cma-no-writes allgather)
endif()
# Two-shot all-reduces by cross-memory attach (direct.c allreduce_cma: each rank reads its part
# of every input, reduces, and writes it into every output), CHORUS_CMA_MIN set so it is on
# untimed: 2 processes; 3 processes and 3 threads with a 32-core topology file, so the ranks do not
# outnumber the cores (on 2 cores it is off); 140001 elements give parts of unequal length.
# --cma-writes allreduce: unless some all-reduce wrote into a peer's output.
if(MPI_C_FOUND)
  chorus_add_test(NAME coll_cma_allreduce_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2 -x CHORUS_ALGO=twoshot
            -x CHORUS_CMA_MIN=16384
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1031,140000,140001 --cma on
            --cma-writes allreduce)
  chorus_add_test(NAME coll_cma_allreduce_mpi_3 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 3 -x CHORUS_ALGO=twoshot
            -x CHORUS_CMA_MIN=16384 -x CHORUS_TOPO_FILE=${CMAKE_CURRENT_SOURCE_DIR}/data/topo_dgx.xml
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140001 --cma on
            --cma-writes allreduce)
endif()
chorus_add_test(NAME coll_cma_allreduce_threads_3 TIMEOUT 300
  COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,140001 --cma on
          --cma-writes allreduce
  ENV CHORUS_ALGO=twoshot CHORUS_CMA_MIN=16384
      CHORUS_TOPO_FILE=${CMAKE_CURRENT_SOURCE_DIR}/data/topo_dgx.xml)
chorus_add_test(NAME coll_cma_threads_2 TIMEOUT 300
  COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 2 --counts 1,7,1031,140000 --cma on
          --cma-writes allgather,broadcast
  ENV CHORUS_ALGO=oneshot)
chorus_add_test(NAME coll_cma_adapt_threads_2 TIMEOUT 300
  COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 2 --counts 1,7,140000 --cma adapt
  ENV CHORUS_ALGO=oneshot CHORUS_CMA_ADAPT=2)

# The zero-copy votes of large all-reduces, broadcasts and reduce-scatters (enqueue.c
# run_zc_vote, direct.c) and of all-gathers (direct.c allgather_push) brought down to 4 KiB, with
# CHORUS_ZCOPY_MIN, the tuner free: chorusMemAlloc buffers on every rank (all: the out-of-place
# all-reduces the tuner gives the ring must win and run two-shot with results read from the
# outputs; broadcasts and out-of-place reduce-scatters must win; all-gathers must push into the
# outputs; at 2 ranks the two-shot all-reduces, 140000 elements, must run by push,
# allreduce_push) or on even ranks only (even: every all-reduce, reduce-scatter and all-gather
# vote must lose, and the ring or the window runs; broadcasts from even roots win, from odd ones
# lose). 64 KiB window buffers: 140000 elements cross many pieces. 4 processes
# on 2 cores broadcast direct at every size (the tuner, src/tuning.c), so no broadcast asks
# there: the broadcast votes run at 2 processes, with cross-memory attach off (where the setup
# finds that it pays, the tuner takes 2-rank broadcasts one-shot by it up to 32 MiB, and none
# would ask).
foreach(mode all even)
  if(mode STREQUAL "all")
    set(vote won)
  else()
    set(vote lost)
  endif()
  chorus_add_test(NAME coll_zcopy_vote_${mode}_threads_3 TIMEOUT 300
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,140000 --memalloc ${mode}
            --zc-allreduce ${vote} --zc-broadcast won --zc-reducescatter ${vote}
            --zc-allgather ${vote}
    ENV CHORUS_ZCOPY_ALLREDUCE_MIN=4096 CHORUS_ZCOPY_BROADCAST_MIN=4096
        CHORUS_ZCOPY_REDUCESCATTER_MIN=4096 CHORUS_ZCOPY_MIN=4096 CHORUS_DIRECT_BUFFSIZE=65536
        CHORUS_ZCOPY_ALLGATHER_MIN=4096)
  if(MPI_C_FOUND)
    chorus_add_test(NAME coll_zcopy_vote_${mode}_mpi_4 TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4
              -x CHORUS_ZCOPY_ALLREDUCE_MIN=4096 -x CHORUS_ZCOPY_BROADCAST_MIN=4096
              -x CHORUS_ZCOPY_REDUCESCATTER_MIN=4096 -x CHORUS_ZCOPY_MIN=4096
              -x CHORUS_DIRECT_BUFFSIZE=65536 -x CHORUS_ZCOPY_ALLGATHER_MIN=4096
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --memalloc ${mode}
              --zc-allreduce ${vote} --zc-reducescatter ${vote} --zc-allgather ${vote})
    chorus_add_test(NAME coll_zcopy_vote_${mode}_mpi_2 TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
              -x CHORUS_ZCOPY_ALLREDUCE_MIN=4096 -x CHORUS_ZCOPY_BROADCAST_MIN=4096
              -x CHORUS_ZCOPY_REDUCESCATTER_MIN=4096 -x CHORUS_ZCOPY_MIN=4096
              -x CHORUS_DIRECT_BUFFSIZE=65536 -x CHORUS_ZCOPY_ALLGATHER_MIN=4096
              -x CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN=4096 -x CHORUS_CMA_MIN=0
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,140000 --memalloc ${mode}
              --zc-broadcast won --zc-allgather ${vote} --zc-allreduce-push ${vote})
  endif()
  # All-reduces by push at 3 and 4 ranks, where the tuner gives these sizes the ring: two-shot
  # forced, 1032 and 140000 (140001 at 3) elements, a multiple of the ranks, from 4 KiB (all:
  # some must run by push; even: none may, two-shot through the window then).
  chorus_add_test(NAME coll_allreduce_push_${mode}_threads_3 TIMEOUT 300
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,1032,140001
            --memalloc ${mode} --zc-allreduce-push ${vote}
    ENV CHORUS_ALGO=twoshot CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN=4096 CHORUS_ZCOPY_MIN=4096)
  if(MPI_C_FOUND)
    chorus_add_test(NAME coll_allreduce_push_${mode}_mpi_4 TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 4
              -x CHORUS_ALGO=twoshot -x CHORUS_ZCOPY_ALLREDUCE_PUSH_MIN=4096
              -x CHORUS_ZCOPY_MIN=4096
              $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1032,140000 --memalloc ${mode}
              --zc-allreduce-push ${vote})
  endif()
endforeach()

# Streaming stores into the output (kernels/host_memops.c's copy_out), forced on every
# out-of-place output of a byte or more with CHORUS_NT_MIN_BYTES=1: the ring and the tree with
# 512-byte slots and the direct algorithms with 4 KiB window buffers, so copies start and end off
# a line and cross many slices; processes, where a peer's flag follows the stores; zero-copy,
# where a peer may read the output; and the large count with the default buffers.
foreach(algo ring tree oneshot twoshot)
  foreach(n 2 3)
    chorus_add_test(NAME coll_stream_${algo}_threads_${n} TIMEOUT 300
      COMMAND $<TARGET_FILE:coll_matrix_threads> --threads ${n} --counts 0,1,7,61,1031,4200
      ENV CHORUS_NT_MIN_BYTES=1 CHORUS_ALGO=${algo} CHORUS_BUFFSIZE=4096
          CHORUS_DIRECT_BUFFSIZE=4096)
  endforeach()
endforeach()
foreach(algo ring twoshot)
  chorus_add_test(NAME coll_stream_${algo}_large_threads_2 TIMEOUT 600
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 2 --counts 1048579 --quick-large
    ENV CHORUS_NT_MIN_BYTES=1 CHORUS_ALGO=${algo})
endforeach()
chorus_add_test(NAME coll_stream_zcopy_oneshot_threads_3 TIMEOUT 300
  COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,140000 --memalloc all
  ENV CHORUS_NT_MIN_BYTES=1 CHORUS_ALGO=oneshot CHORUS_DIRECT_BUFFSIZE=65536
      CHORUS_ZCOPY_MIN=512K CHORUS_ZCOPY_BROADCAST_MIN=512K)
# Send slots written plainly and streamed, call by call (CHORUS_SLOT_ADAPT=2, src/slot_adapt.c):
# the results stay right whichever way a rank wrote, and every rank wrote both ways.
chorus_add_test(NAME coll_slot_adapt_threads_2 TIMEOUT 300
  COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 2 --counts 1,7,1031,140000 --slot-modes
  ENV CHORUS_SLOT_ADAPT=2 CHORUS_ALGO=ring)
# The same for the direct algorithms' copies into a rank's window (CHORUS_WINDOW_ADAPT=2,
# src/enqueue.c run_coll): one-shot and two-shot, two and three ranks (processes: without
# cross-memory attach, whose two-shot all-reduces copy nothing into the window).
foreach(algo oneshot twoshot)
  chorus_add_test(NAME coll_window_adapt_${algo}_threads_3 TIMEOUT 300
    COMMAND $<TARGET_FILE:coll_matrix_threads> --threads 3 --counts 1,7,1031,140000 --window-modes
    ENV CHORUS_WINDOW_ADAPT=2 CHORUS_ALGO=${algo})
endforeach()
if(MPI_C_FOUND)
  chorus_add_test(NAME coll_window_adapt_twoshot_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            -x CHORUS_WINDOW_ADAPT=2 -x CHORUS_ALGO=twoshot -x CHORUS_DIRECT_BUFFSIZE=65536
            -x CHORUS_CMA_MIN=0
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1031,140000 --window-modes)
  chorus_add_test(NAME coll_slot_adapt_mpi_3 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 3
            -x CHORUS_SLOT_ADAPT=2 -x CHORUS_ALGO=ring -x CHORUS_BUFFSIZE=16384
            $<TARGET_FILE:coll_matrix_mpi> --counts 1,7,1031,140000 --slot-modes)
  chorus_add_test(NAME coll_stream_ring_mpi_3 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 3
            -x CHORUS_NT_MIN_BYTES=1 -x CHORUS_ALGO=ring -x CHORUS_BUFFSIZE=4096
            $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,61,1031,4200)
endif()

# Two ranks calling one collective with different counts where data moves by cross-memory attach
# (CHORUS_CMA_MIN=16K; at three ranks on this 2-core machine the windows carry it, where a
# mismatch gives wrong results or a timeout as CHORUS_CHECK_ARGS says): both fail, one says to
# compare the counts, nothing past any buffer changes (tests/test_count_mismatch.c).
if(MPI_C_FOUND)
  add_executable(test_count_mismatch test_count_mismatch.c)
  target_link_libraries(test_count_mismatch chorus_test_harness MPI::MPI_C)
  chorus_add_test(NAME coll_count_mismatch_mpi_2 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            -x CHORUS_CMA_MIN=16K -x CHORUS_TIMEOUT_MS=60000 $<TARGET_FILE:test_count_mismatch>)
endif()

# Issue 6's "no allocation or page fault on the hot path" (tests/test_hotpath.c): after a few
# calls with the same buffers and size, every collective, 64 B-32 MiB, malloc'd and
# chorusMemAlloc buffers, in and out of place, allocates, maps and faults nothing on the calling
# thread. Processes (the shm segments of thread ranks are one mapping); the tuner's picks at 2 and
# 4 ranks, and the ring forced at 3.
if(MPI_C_FOUND)
  add_executable(test_hotpath test_hotpath.c)
  target_link_libraries(test_hotpath chorus_test_harness MPI::MPI_C)
  foreach(n 2 4)
    chorus_add_test(NAME coll_hotpath_mpi_${n} TIMEOUT 300
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:test_hotpath>)
  endforeach()
  chorus_add_test(NAME coll_hotpath_ring_mpi_3 TIMEOUT 300
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 3
            -x CHORUS_ALGO=ring $<TARGET_FILE:test_hotpath>)
endif()
