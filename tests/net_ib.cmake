# The IB net plugin (transports/net_ib.c) against the verbs emulator (softverbs.cmake's
# libsoftverbs.so), both ends in one process: traffic over 1-3 QPs, refusals, posts outside a
# registration, dead peers, and (in fresh processes) injected completion errors, RoCE GID choice,
# CHORUS_IB_HCA selection, a missing libibverbs. CPU only; a few seconds.
if(NOT CHORUS_HAVE_VERBS_H)
  message(STATUS "Chorus: no verbs headers; net_ib tests are not declared")
  return()
endif()
add_executable(net_ib_test net_ib_test.c)
target_link_libraries(net_ib_test chorus_test_harness chorus_internal Threads::Threads)
add_dependencies(net_ib_test softverbs) # loaded at run time: build it with the test
chorus_add_test(NAME net_ib COMMAND net_ib_test $<TARGET_FILE:softverbs> TIMEOUT 120 LABELS net ib)
