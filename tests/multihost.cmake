# Multi-host correctness on one machine (LABELS multihost): the collectives' matrix
# (coll_matrix.c) under mpirun, each rank placed on simulated host rank / R by
# tests/support/hostid_wrap.sh (CHORUS_HOSTID=simhost<k>), so ranks on one host connect over shm
# and ranks on different hosts over the net transport (TCP on this machine's own interface).
#
#   layouts    2 hosts x 2 ranks, 4 hosts x 2 ranks, and 3 + 2 ranks (below)
#   algorithm  the tuner's choice; CHORUS_ALGO=ring; CHORUS_ALGO=tree (tree serves allreduce,
#              broadcast and reduce; the others fall back to ring, src/tuning.c)
#   counts     coll.cmake's small counts 0,1,7,1031, 2 channels, with 64-byte FIFO slots on 2 x 2
#              (CHORUS_BUFFSIZE=512, as coll.cmake) and 256-byte slots on 4 x 2 (2048: 1031
#              elements still cross several slices per rank, at a third of the time); the large
#              count 2^20+3 (--quick-large, default slots) only on 2 x 2
#
# check_transports.sh then proves, on both layouts, that every connection took the transport the
# layout calls for (shm inside a host, net across). With netns.cmake, about 4 minutes at ctest -j2
# on 2 cores; the 4 x 2 runs are the longest (about a minute each).
if(NOT MPI_C_FOUND OR NOT TARGET coll_matrix_mpi)
  message(STATUS "Chorus: no MPI; multihost tests are not declared (netns.cmake's need none)")
  return()
endif()

set(mh_wrap ${CMAKE_CURRENT_SOURCE_DIR}/support/hostid_wrap.sh)
set(mh_check ${CMAKE_CURRENT_SOURCE_DIR}/support/check_transports.sh)
set(mh_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)

# layout:FIFO bytes (CHORUS_BUFFSIZE):TIMEOUT
foreach(mh_entry 2x2:512:180 4x2:2048:360)
  string(REPLACE ":" ";" mh_spec ${mh_entry})
  list(GET mh_spec 0 mh_layout)
  list(GET mh_spec 1 mh_buffsize)
  list(GET mh_spec 2 mh_timeout)
  string(REPLACE "x" ";" mh_dims ${mh_layout})
  list(GET mh_dims 0 mh_hosts)
  list(GET mh_dims 1 mh_per_host)
  math(EXPR mh_np "${mh_hosts} * ${mh_per_host}")
  set(mh_small -x CHORUS_BUFFSIZE=${mh_buffsize} -x CHORUS_NCHANNELS=2)
  foreach(mh_kind auto ring tree)
    set(mh_algo)
    if(NOT mh_kind STREQUAL "auto")
      set(mh_algo -x CHORUS_ALGO=${mh_kind})
    endif()
    chorus_add_test(NAME multihost_${mh_layout}_${mh_kind} TIMEOUT ${mh_timeout} LABELS multihost
      COMMAND ${mh_mpirun} -np ${mh_np} ${mh_small} ${mh_algo}
              ${mh_wrap} ${mh_per_host} $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,1031)
  endforeach()
  chorus_add_test(NAME multihost_transports_${mh_layout} TIMEOUT 180 LABELS multihost
    COMMAND ${mh_check} --ranks-per-host ${mh_per_host} --nranks ${mh_np} --
            ${mh_mpirun} -np ${mh_np} -x CHORUS_NCHANNELS=2
            ${mh_wrap} ${mh_per_host} $<TARGET_FILE:coll_matrix_mpi> --counts 7)
endforeach()

# Uneven hosts, 3 + 2 ranks (ranks 0-2 and 3-4): rank 1, in the middle of its host, has no net
# connection after init (the rings cross between hosts at 2-3 and 4-0), so its first one is made
# during an operation; its proxy, started then, never posted that operation's receives (every
# send/recv, all-to-all and tree reduce into rank 1 from the other host timed out). The matrix,
# the tuner's choice and the tree.
foreach(mh_kind auto tree)
  set(mh_algo)
  if(NOT mh_kind STREQUAL "auto")
    set(mh_algo -x CHORUS_ALGO=${mh_kind})
  endif()
  chorus_add_test(NAME multihost_3+2_${mh_kind} TIMEOUT 300 LABELS multihost
    COMMAND ${mh_mpirun} -np 5 ${mh_algo} -x CHORUS_TIMEOUT_MS=60000
            ${mh_wrap} 3 $<TARGET_FILE:coll_matrix_mpi> --counts 0,1,7,1031)
endforeach()

chorus_add_test(NAME multihost_2x2_large TIMEOUT 400 LABELS multihost
  COMMAND ${mh_mpirun} -np 4 -x CHORUS_NCHANNELS=2
          ${mh_wrap} 2 $<TARGET_FILE:coll_matrix_mpi> --counts 1048579 --quick-large)
