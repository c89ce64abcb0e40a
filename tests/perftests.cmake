# perftests under ctest: the *_perf benchmarks with every dtype x op, checked bit-exactly. The
# driver tests/perftests_run.sh fails a run whose exit code is non-zero, whose table has a non-zero
# #wrong column, or that prints no rows; it exits 77 (SKIP) without mpirun. CHORUS_PERF_TIMEOUT
# (each entry's TIMEOUT less 30 s) bounds every process, so none outlives a timed-out test.
#
# perftests/ is added after tests/, so its targets do not exist yet when this fragment is read:
# the entries are declared at the end of the top-level directory, when they do.
function(chorus_perftests_add_tests run)
  if(NOT TARGET all_reduce_perf)
    message(STATUS "Chorus: perftests not built (no MPI or CHORUS_BUILD_PERFTESTS=OFF); no perf tests")
    return()
  endif()
  set(mpirun ${MPIEXEC_EXECUTABLE})
  if(NOT mpirun)
    set(mpirun mpirun)
  endif()
  set(all -b 8 -e 1M -f 4 -d all -o all -n 2 -w 1)
  # Four ranks under mpirun (chorusCommInitMPI), aggregation through MPI.
  chorus_add_test(NAME perf_all_reduce_mpi4
    COMMAND ${run} mpi 4 ${mpirun} $<TARGET_FILE:all_reduce_perf> ${all}
    TIMEOUT 600 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=570)
  # Two ranks joined by CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT, aggregation through Chorus.
  chorus_add_test(NAME perf_all_reduce_env2
    COMMAND ${run} env 2 - $<TARGET_FILE:all_reduce_perf> ${all}
    TIMEOUT 300 LABELS perf ENV CHORUS_PERF_TIMEOUT=270)
  # --compare mpi prints the MPI columns; a host stream (-y 0) and grouped calls (-m 2) run too.
  chorus_add_test(NAME perf_all_reduce_compare_mpi
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 1K -e 256K -f 16 -d float
      -o sum -n 5 -w 2 --compare mpi
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270)
  chorus_add_test(NAME perf_all_reduce_stream_group
    COMMAND ${run} mpi 3 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 0 -e 64K -f 8 -d all -o sum
      -n 3 -w 1 -y 0 -m 2 -z 1
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270)
  # The other benchmarks, on an odd rank count.
  foreach(name reduce_scatter all_gather broadcast reduce alltoall sendrecv)
    if(TARGET ${name}_perf)
      chorus_add_test(NAME perf_${name}_mpi3
        COMMAND ${run} mpi 3 ${mpirun} $<TARGET_FILE:${name}_perf> -b 8 -e 256K -f 8 -d all
          -o all -r -1 -n 2 -w 1
        TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270)
    endif()
  endforeach()
endfunction()

if(TARGET all_reduce_perf)
  chorus_perftests_add_tests(${CMAKE_CURRENT_SOURCE_DIR}/perftests_run.sh)
else()
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]]
    CALL chorus_perftests_add_tests [[${CMAKE_CURRENT_SOURCE_DIR}/perftests_run.sh]])")
endif()
