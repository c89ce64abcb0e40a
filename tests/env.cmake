# The README's environment-variable table is the library's own table, row for row.
add_executable(env_table env_table.c)
target_link_libraries(env_table chorus_internal)
chorus_add_test(NAME env_table_in_readme TIMEOUT 30
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/env_table_check.sh $<TARGET_FILE:env_table>
          ${PROJECT_SOURCE_DIR}/README.md)

# CHORUS_DEBUG, CHORUS_DEBUG_SUBSYS, CHORUS_DEBUG_FILE.
chorus_add_test(NAME logging TIMEOUT 60
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/logging.sh $<TARGET_FILE:coll_matrix_threads> --threads 2
          --counts 1)

# CHORUS_SOCKET_IFNAME: prefix, exclusion, exact name, no match.
chorus_add_test(NAME socket_ifname TIMEOUT 120
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/socket_ifname.sh $<TARGET_FILE:coll_matrix_threads>
          --threads 2 --counts 1)
