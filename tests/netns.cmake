# Multi-host runs over a real (virtual) network (LABELS netns): tests/support/netns_run.sh gives
# every simulated host its own network namespace, joined by a bridge, and starts the ranks there
# with chorusCommInitEnv (coll_matrix --env), so bootstrap and the net transport cross veth links
# between distinct IP addresses, as between machines. Needs root (namespaces): elsewhere every
# entry says SKIP (exit 77). Each run's namespaces carry its pid, so ctest -j runs them side by
# side. No MPI needed.
#
#   netns_2x2          2 hosts x 2 ranks, small counts, 64-byte FIFO slots, 2 channels
#   netns_3x1          3 hosts x 1 rank (net only, an odd ring), each host's egress shaped to
#                      1 Gbit/s (netem, or tbf where the kernel has no netem)
#   netns_2x2_tree     as netns_2x2 with CHORUS_ALGO=tree
#   netns_transports   every connection of a 2 x 2 job on the transport its layout calls for
#   netns_tcp_stream   the harness itself: tcp_stream server and client in two namespaces
set(nn_run ${CMAKE_CURRENT_SOURCE_DIR}/support/netns_run.sh)
set(nn_check ${CMAKE_CURRENT_SOURCE_DIR}/support/check_transports.sh)
set(nn_small --env CHORUS_BUFFSIZE=512 --env CHORUS_NCHANNELS=2)
set(nn_matrix $<TARGET_FILE:coll_matrix_threads> --env --counts 0,1,7,1031)

chorus_add_test(NAME netns_2x2 TIMEOUT 180 LABELS netns
  COMMAND ${nn_run} --hosts 2 --ranks-per-host 2 --timeout 150 ${nn_small} -- ${nn_matrix})
chorus_add_test(NAME netns_3x1 TIMEOUT 180 LABELS netns
  COMMAND ${nn_run} --hosts 3 --ranks-per-host 1 --timeout 150 --netem "rate 1gbit"
          --shape-fallback ${nn_small} -- ${nn_matrix})
chorus_add_test(NAME netns_2x2_tree TIMEOUT 180 LABELS netns
  COMMAND ${nn_run} --hosts 2 --ranks-per-host 2 --timeout 150 ${nn_small}
          --env CHORUS_ALGO=tree -- ${nn_matrix})
chorus_add_test(NAME netns_transports TIMEOUT 120 LABELS netns
  COMMAND ${nn_check} --ranks-per-host 2 --nranks 4 --
          ${nn_run} --hosts 2 --ranks-per-host 2 --timeout 90 --env CHORUS_NCHANNELS=2
          -- $<TARGET_FILE:coll_matrix_threads> --env --counts 7)

# tcp_stream is built with the perftests (perftests/CMakeLists.txt, even without MPI).
if(CHORUS_BUILD_PERFTESTS)
  string(CONCAT nn_stream "[ $CHORUS_RANK = 0 ] && exec $0 --server"
                          " || exec $0 --client $NETNS_RUN_HOST0_ADDR -b 4M -n 5 -w 1")
  chorus_add_test(NAME netns_tcp_stream TIMEOUT 60 LABELS netns
    COMMAND ${nn_run} --hosts 2 --ranks-per-host 1 --timeout 45 --
            sh -c ${nn_stream} $<TARGET_FILE:tcp_stream>)
endif()
