# softverbs: a user-space emulator of libibverbs (tests/support/softverbs*.c) that the InfiniBand
# net plugin's tests dlopen instead of libibverbs.so.1, so verbs code runs on any Linux host.
# softverbs_test proves the emulator itself through the verbs API, as a consumer uses it: RDMA
# writes, sends, the error completions hardware gives, dead peers, completion channels, faults,
# RoCE addressing. Test support only; never installed. A few seconds in all.
find_path(CHORUS_VERBS_INCLUDE infiniband/verbs.h)
if(NOT CHORUS_VERBS_INCLUDE)
  message(STATUS "softverbs: infiniband/verbs.h not found; the verbs emulator is not built")
  return()
endif()
add_library(softverbs SHARED support/softverbs.c support/softverbs_wire.c)
target_include_directories(softverbs PRIVATE ${CHORUS_VERBS_INCLUDE})
target_link_libraries(softverbs PRIVATE Threads::Threads)
set_target_properties(softverbs PROPERTIES C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/support)

add_executable(softverbs_test softverbs_test.c)
target_include_directories(softverbs_test PRIVATE ${CHORUS_VERBS_INCLUDE})
target_link_libraries(softverbs_test ${CMAKE_DL_LIBS} Threads::Threads)
add_dependencies(softverbs_test softverbs) # loaded at run time: build it with the test
chorus_add_test(NAME softverbs_rc TIMEOUT 60 LABELS net ib
  COMMAND softverbs_test $<TARGET_FILE:softverbs> rc)
chorus_add_test(NAME softverbs_eth TIMEOUT 60 LABELS net ib
  COMMAND softverbs_test $<TARGET_FILE:softverbs> eth ENV SOFTVERBS_LINK_LAYER=eth)
chorus_add_test(NAME softverbs_list TIMEOUT 60 LABELS net ib
  COMMAND softverbs_test $<TARGET_FILE:softverbs> list
  ENV SOFTVERBS_DEVICES=2 SOFTVERBS_PORTS_DOWN=softverbs1)
