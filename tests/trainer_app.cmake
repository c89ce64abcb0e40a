# chorus-train end to end under mpirun (tests/test_trainer_app.sh says what each case proves).
# Each case is a few runs of a few seconds on small layers (about 5-20 s on 2 cores); TIMEOUT leaves
# room for a loaded machine. They skip without the data set.
if(TARGET chorus-train)
  add_executable(test_trainer_app_cmp test_trainer_app_cmp.c)
  target_link_libraries(test_trainer_app_cmp m)
  set(mpirun ${MPIEXEC_EXECUTABLE})
  if(NOT mpirun)
    set(mpirun mpirun)
  endif()
  set(run ${CMAKE_CURRENT_SOURCE_DIR}/test_trainer_app.sh)
  set(exes ${mpirun} $<TARGET_FILE:chorus-train> $<TARGET_FILE:test_trainer_app_cmp>)
  foreach(n 2 3 4)
    chorus_add_test(NAME trainer_app_equal_${n} COMMAND ${run} equal ${exes} ${n}
      TIMEOUT 120 LABELS trainer mpi)
  endforeach()
  foreach(case mpi overlap accum checksum resume resume_mid pitfalls baddata flags plot)
    chorus_add_test(NAME trainer_app_${case} COMMAND ${run} ${case} ${exes}
      TIMEOUT 120 LABELS trainer mpi)
  endforeach()
endif()
