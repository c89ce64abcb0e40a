# Rings and trees (algorithms/graph.c, tree.c): every rank's view agrees, for many host layouts.
add_executable(test_graph test_graph.c)
target_link_libraries(test_graph chorus_internal)
chorus_add_test(NAME graph COMMAND test_graph TIMEOUT 60 LABELS graph)
