# The collectives over the IB net plugin on the verbs emulator (LABELS multihost ib): the
# correctness matrix (coll_matrix.c) with hosts simulated by CHORUS_HOSTID, CHORUS_NET=IB forced
# (so a run that passes cannot have fallen back to sockets) and CHORUS_IBVERBS_PATH pointing the
# plugin at tests/support/libsoftverbs.so, whose checks of every lkey, rkey and range make the
# whole matrix the access-error test: a post outside a registered region fails the run.
#   layouts  2 hosts x 2 ranks (tuner's choice, and ring), 4 hosts x 1 rank (tree), small counts
#            0,1,7,1031 through 64-byte slots; 2 x 2 with 2^20+3 elements over 2 QPs per connection
#   faults   test_faults.c's kill and sigstop cases with every rank on its own host over IB
#   fallback without the emulator the plugin finds no device and the job runs over sockets;
#            CHORUS_NET=IB then is a clear error, and so are ranks on different plugins
#            (ib_fallback.sh)
if(NOT CHORUS_HAVE_VERBS_H OR NOT MPI_C_FOUND OR NOT TARGET coll_matrix_mpi)
  message(STATUS "Chorus: no verbs headers or no MPI; the IB multihost tests are not declared")
  return()
endif()

set(ib_wrap ${CMAKE_CURRENT_SOURCE_DIR}/support/hostid_wrap.sh)
set(ib_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
set(ib_env -x CHORUS_NET=IB -x CHORUS_IBVERBS_PATH=$<TARGET_FILE:softverbs>)

# name:ranks per host:ranks:extra env (^-separated):TIMEOUT
foreach(ib_entry 2x2_auto:2:4::240 2x2_ring:2:4:CHORUS_ALGO=ring:240
    4x1_tree:1:4:CHORUS_ALGO=tree:240)
  string(REPLACE ":" ";" ib_spec "${ib_entry}")
  list(GET ib_spec 0 ib_name)
  list(GET ib_spec 1 ib_per_host)
  list(GET ib_spec 2 ib_np)
  list(GET ib_spec 3 ib_extra)
  list(GET ib_spec 4 ib_timeout)
  set(ib_x)
  if(ib_extra)
    set(ib_x -x ${ib_extra})
  endif()
  chorus_add_test(NAME multihost_ib_${ib_name} TIMEOUT ${ib_timeout} LABELS multihost ib
    COMMAND ${ib_mpirun} -np ${ib_np} ${ib_env} ${ib_x} -x CHORUS_BUFFSIZE=512
            -x CHORUS_NCHANNELS=2 ${ib_wrap} ${ib_per_host} $<TARGET_FILE:coll_matrix_mpi>
            --counts 0,1,7,1031)
endforeach()
chorus_add_test(NAME multihost_ib_2x2_large TIMEOUT 400 LABELS multihost ib
  COMMAND ${ib_mpirun} -np 4 ${ib_env} -x CHORUS_IB_QPS_PER_CONNECTION=2 -x CHORUS_NCHANNELS=2
          ${ib_wrap} 2 $<TARGET_FILE:coll_matrix_mpi> --counts 1048579 --quick-large)

# Dead and stopped peers over IB: the same bounds as over sockets (faults.cmake). The emulator's
# retry timeout is not what catches a killed peer: the plugin's side channel sees its EOF first.
foreach(ib_fault kill:kill^net^4:600 sigstop:sigstop^net:180)
  string(REPLACE ":" ";" ib_spec ${ib_fault})
  list(GET ib_spec 0 ib_name)
  list(GET ib_spec 1 ib_args)
  list(GET ib_spec 2 ib_timeout)
  string(REPLACE "^" ";" ib_args ${ib_args})
  chorus_add_test(NAME faults_${ib_name}_ib COMMAND test_faults ${ib_args} TIMEOUT ${ib_timeout}
    LABELS faults ib ENV CHORUS_NET=IB CHORUS_IBVERBS_PATH=$<TARGET_FILE:softverbs>)
  set_tests_properties(faults_${ib_name}_ib PROPERTIES RUN_SERIAL TRUE)
endforeach()

chorus_add_test(NAME ib_fallback TIMEOUT 120 LABELS multihost ib
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/ib_fallback.sh ${MPIEXEC_EXECUTABLE} ${ib_wrap}
          $<TARGET_FILE:coll_matrix_mpi> $<TARGET_FILE:softverbs>)
