# perftests under ctest: the *_perf benchmarks with every dtype x op, checked bit-exactly. The
# driver tests/perftests_run.sh fails a run whose exit code is non-zero, whose table has a non-zero
# #wrong column, or that prints no rows; with --compare mpi, one without the MPI columns or the
# MPI summary lines; with CHORUS_PERF_JSON_ROWS=N, one whose -J file is not valid JSON, has not N
# rows (the size sweep x dtypes x ops x roots, counted here from the flags) or differs from the
# table (tests/perftests_json_check.py). It exits 77 (SKIP) without mpirun. CHORUS_PERF_TIMEOUT
# (each entry's TIMEOUT less 30 s) bounds every process, so none outlives a timed-out test.
# Timings are printed, never judged.
#
# perftests/ is added after tests/, so its targets do not exist yet when this fragment is read:
# the entries are declared at the end of the top-level directory, when they do.
function(chorus_perftests_add_tests run)
  if(NOT TARGET all_reduce_perf)
    message(STATUS "Chorus: perftests not built (no MPI or CHORUS_BUILD_PERFTESTS=OFF); no perf tests")
    return()
  endif()
  get_filename_component(tests_dir ${run} DIRECTORY)
  set(mpirun ${MPIEXEC_EXECUTABLE})
  if(NOT mpirun)
    set(mpirun mpirun)
  endif()
  # 8 B .. 1M by 4: 9 sizes, x 10 dtypes x 5 ops = 450 rows (the JSON checks count them).
  set(all -b 8 -e 1M -f 4 -d all -o all -n 2 -w 1)
  # Four ranks under mpirun (chorusCommInitMPI), aggregation through MPI.
  chorus_add_test(NAME perf_all_reduce_mpi4
    COMMAND ${run} mpi 4 ${mpirun} $<TARGET_FILE:all_reduce_perf> ${all}
    TIMEOUT 600 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=570 CHORUS_PERF_JSON_ROWS=450)
  # Two ranks joined by CHORUS_RANK/CHORUS_NRANKS/CHORUS_ROOT, aggregation through Chorus; rank 0
  # writes the JSON there too.
  chorus_add_test(NAME perf_all_reduce_env2
    COMMAND ${run} env 2 - $<TARGET_FILE:all_reduce_perf> ${all}
    TIMEOUT 300 LABELS perf ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=450)
  # --compare mpi prints the MPI columns and summary, interleaved with a host stream (-y 0) and
  # grouped calls (-m 2); 1K, 16K, 256K: 3 rows.
  chorus_add_test(NAME perf_all_reduce_compare_mpi
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 1K -e 256K -f 16 -d float
      -o sum -n 5 -w 2 -y 0 -m 2 --compare mpi
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=3)
  # The issue's second MPI run: glibc told not to return big buffers to the kernel, neither by
  # munmap (MALLOC_MMAP_MAX_=0) nor by trimming the heap (MALLOC_TRIM_THRESHOLD_, perftests/sweep);
  # the JSON records both. Every dtype: half and bfloat16 rows have no MPI numbers, the others
  # do. 8 B .. 32K by 8: 5 sizes x 10 dtypes = 50 rows.
  chorus_add_test(NAME perf_all_reduce_mmap0
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 8 -e 32K -f 8 -d all -o sum
      -n 4 -w 1 --compare mpi
    TIMEOUT 120 LABELS perf mpi
    ENV CHORUS_PERF_TIMEOUT=90 MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296
      CHORUS_PERF_JSON_ROWS=50
      "CHORUS_PERF_JSON_ENV=MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296")
  # --offset 16: buffers 16 bytes past a page, as glibc's malloc places those of 128 KiB and
  # more, so that copies out of the page-aligned windows run kernels/host_memops.c's copy_skewed
  # (a 2-rank all-gather through the window, a 4-rank broadcast and all-reduce; 8K .. 2M by 4:
  # 5 sizes x 10 dtypes = 50 rows, and 5 for the float sum). Fails where that copy is wrong.
  chorus_add_test(NAME perf_all_gather_offset16_window
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_gather_perf> --offset 16 -b 8K -e 2M -f 4
      -d all -n 2 -w 1
    TIMEOUT 300 LABELS perf mpi
    ENV CHORUS_PERF_TIMEOUT=270 CHORUS_CMA_MIN=0 CHORUS_PERF_JSON_ROWS=50)
  chorus_add_test(NAME perf_broadcast_offset16_mpi4
    COMMAND ${run} mpi 4 ${mpirun} $<TARGET_FILE:broadcast_perf> --offset 16 -b 8K -e 2M -f 4
      -d all -n 2 -w 1
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=50)
  chorus_add_test(NAME perf_all_reduce_offset16_mpi4
    COMMAND ${run} mpi 4 ${mpirun} $<TARGET_FILE:all_reduce_perf> --offset 16 -b 8K -e 2M -f 4
      -d float -o sum -n 2 -w 1
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=5)
  # -R 1: chorusMemAlloc buffers, MPI on the same buffers (at these sizes the all-reduce copies
  # them as malloc'd ones; coll_zcopy_* test the reads in place). 512K .. 4M by 2: 4 sizes x 10
  # dtypes = 40 rows.
  chorus_add_test(NAME perf_all_reduce_memalloc
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 512K -e 4M -f 2 -d all
      -o sum -n 3 -w 1 -R 1 --compare mpi
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=40)
  # --rewrite 1|2: each timed iteration writes its input again first (Chorus' and MPI's alike;
  # MPI_Bcast's is its one buffer), with plain vector stores (1) or memcpy (2), chorusMemAlloc
  # buffers. The check's call reads what the rewrite wrote over an input made wrong first, so a
  # rewrite that writes nothing fails it. 1004 B (a tail past the 128-byte turns), 16064 B, 251
  # KiB: 3 rows.
  foreach(spec all_reduce:1 broadcast:2)
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 mode)
    chorus_add_test(NAME perf_${name}_rewrite
      COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:${name}_perf> -b 1004 -e 300K -f 16 -d float
        -o sum -n 3 -w 1 -R 1 --rewrite ${mode} --compare mpi
      TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=3)
  endforeach()
  # --compare mpi for each other collective: MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast,
  # MPI_Reduce, MPI_Alltoall, MPI_Sendrecv, every dtype, with (-z 1) and without a barrier after
  # each call. 8 B .. 32K by 8: 5 sizes x 10 dtypes, x 2 roots (-r -1 on 2 ranks) when rooted.
  foreach(spec reduce_scatter:0:50 all_gather:1:50 broadcast:0:100 reduce:1:100 alltoall:0:50
      sendrecv:1:50)
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 blocking)
    list(GET spec 2 nrows)
    if(TARGET ${name}_perf)
      chorus_add_test(NAME perf_${name}_compare_mpi
        COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:${name}_perf> -b 8 -e 32K -f 8 -d all -o sum
          -r -1 -n 4 -w 1 -z ${blocking} --compare mpi
        TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=${nrows})
    endif()
  endforeach()
  # --compare gloo: Gloo over loopback TCP (as PyTorch's gloo backend on one host) on the same
  # buffers: its columns and summary lines, and Gloo's own result checked once a row (common.c),
  # every dtype (Gloo lacks half, bfloat16, uint32, avg and empty calls: N/A there). SKIP in a
  # build without Gloo.
  # 8 B .. 32K by 8: 5 sizes x 10 dtypes, x 2 roots when rooted; and 3 ranks, float, every op,
  # 8 B .. 256K by 8 (6 sizes x 5 ops).
  foreach(spec all_reduce:50 all_gather:50 broadcast:100 reduce:100 alltoall:50)
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 nrows)
    if(TARGET ${name}_perf)
      chorus_add_test(NAME perf_${name}_compare_gloo
        COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:${name}_perf> -b 8 -e 32K -f 8 -d all -o sum
          -r -1 -n 4 -w 1 --compare gloo
        TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=${nrows})
    endif()
  endforeach()
  chorus_add_test(NAME perf_all_reduce_compare_gloo3
    COMMAND ${run} mpi 3 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 8 -e 1M -f 8 -d float
      -o all -n 4 -w 1 --compare gloo
    TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=30)
  # perftests/plot draws the user run and the MALLOC_MMAP_MAX_=0 run into one PNG.
  chorus_add_test(NAME perf_plot
    COMMAND ${tests_dir}/perftests_plot.sh ${mpirun}
      $<TARGET_FILE:all_reduce_perf> ${PROJECT_SOURCE_DIR}/perftests/plot
    TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=45)
  # -C 1 (cputime) with --compare mpi: the time columns are cputime, the ratio MPI's wall time over
  # Chorus' (the -J file's wall_us), as nccl-tests' bandwidths are from wall time. 3 rows.
  chorus_add_test(NAME perf_all_reduce_cputime
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 1K -e 256K -f 16 -d float
      -o sum -n 4 -w 1 -y 0 -C 1 --compare mpi
    TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=3)
  # Rows of 0 bytes (-b 0, and 1, 2, 4 B of doubles: no element) stay in the table, as nccl-tests
  # prints them, but out of the MPI ratio's summary (summary.mpi.empty_rows counts them). 0, 1, 2,
  # 4, 8, 16: 6 rows.
  chorus_add_test(NAME perf_all_reduce_empty_rows
    COMMAND ${run} mpi 2 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 0 -e 16 -f 2 -d double
      -o sum -n 3 -w 1 --compare mpi
    TIMEOUT 120 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=90 CHORUS_PERF_JSON_ROWS=6)
  # Bad flags refused with a message naming them, maxBytes fitted to memory, -T, -r, the memcpy
  # line's row, JSON strings, the peer's labels and columns (tests/perftests_flags.sh).
  chorus_add_test(NAME perf_flags
    COMMAND ${tests_dir}/perftests_flags.sh ${mpirun} $<TARGET_FILE_DIR:all_reduce_perf>
    TIMEOUT 180 LABELS perf mpi)
  # perftests/table on -J files the script writes (no MPI run).
  chorus_add_test(NAME perf_table
    COMMAND ${tests_dir}/perftests_table.sh ${PROJECT_SOURCE_DIR}/perftests/table
    TIMEOUT 60 LABELS perf)
  # perftests/alternate: two variants of a short 2-rank all-reduce, two rounds; a failing variant
  # and bad usage refused.
  chorus_add_test(NAME perf_alternate
    COMMAND ${tests_dir}/perftests_alternate.sh ${PROJECT_SOURCE_DIR}/perftests/alternate
      ${PROJECT_BINARY_DIR}
    TIMEOUT 180 LABELS perf mpi)
  # perftests/floor: one short round of the 4-rank small all-reduce beside its floor.
  chorus_add_test(NAME perf_floor
    COMMAND ${tests_dir}/perftests_floor.sh ${PROJECT_SOURCE_DIR}/perftests/floor
      ${PROJECT_BINARY_DIR}
    TIMEOUT 180 LABELS perf mpi)
  # perftests/sweep with a flag for every run (-a "--offset 16"), one collective at 2 ranks.
  chorus_add_test(NAME perf_sweep_args
    COMMAND ${tests_dir}/perftests_sweep.sh ${PROJECT_SOURCE_DIR}/perftests/sweep
      ${PROJECT_BINARY_DIR}
    TIMEOUT 180 LABELS perf mpi)
  # perftests/pages: one rank's pages in 2 ms of 4-rank 8 B all-reduces.
  chorus_add_test(NAME perf_pages
    COMMAND ${tests_dir}/perftests_pages.sh ${PROJECT_SOURCE_DIR}/perftests/pages
      ${PROJECT_BINARY_DIR}
    TIMEOUT 150 LABELS perf mpi)
  chorus_add_test(NAME perf_all_reduce_stream_group
    COMMAND ${run} mpi 3 ${mpirun} $<TARGET_FILE:all_reduce_perf> -b 0 -e 64K -f 8 -d all -o sum
      -n 3 -w 1 -y 0 -m 2 -z 1
    TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270)
  # The other benchmarks, on an odd rank count. 8 B .. 256K by 8: 6 sizes x 10 dtypes, x 5 ops
  # when the collective reduces, x 3 roots (-r -1) when it has one.
  foreach(spec reduce_scatter:300 all_gather:60 broadcast:180 reduce:900 alltoall:60 sendrecv:60)
    string(REPLACE ":" ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 nrows)
    if(TARGET ${name}_perf)
      chorus_add_test(NAME perf_${name}_mpi3
        COMMAND ${run} mpi 3 ${mpirun} $<TARGET_FILE:${name}_perf> -b 8 -e 256K -f 8 -d all
          -o all -r -1 -n 2 -w 1
        TIMEOUT 300 LABELS perf mpi ENV CHORUS_PERF_TIMEOUT=270 CHORUS_PERF_JSON_ROWS=${nrows})
    endif()
  endforeach()
endfunction()

if(TARGET all_reduce_perf)
  chorus_perftests_add_tests(${CMAKE_CURRENT_SOURCE_DIR}/perftests_run.sh)
else()
  cmake_language(EVAL CODE "cmake_language(DEFER DIRECTORY [[${PROJECT_SOURCE_DIR}]]
    CALL chorus_perftests_add_tests [[${CMAKE_CURRENT_SOURCE_DIR}/perftests_run.sh]])")
endif()
