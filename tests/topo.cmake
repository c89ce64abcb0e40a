# Topology (src/topo.c): the synthetic hwloc XML hosts in tests/data (a DGX-like box, a 2-socket
# host) with exact counts and PCI paths, the live machine and its dump, error texts, concurrent
# loads. CPU only; runs in about a second.
add_executable(topo_test topo_test.c)
target_link_libraries(topo_test chorus_test_harness)
chorus_add_test(NAME topo COMMAND topo_test ${CMAKE_CURRENT_SOURCE_DIR}/data TIMEOUT 60
  LABELS topo)
