# Installation (DESIGN Appendix A): libchorus.so (+ soname links), libchorus.a, the public headers,
# a CMake package (find_package(Chorus) -> Chorus::chorus, Chorus::chorus_static) and chorus.pc.
# It is relocatable: the package and chorus.pc find the prefix from where they lie, so
# `cmake --install build --prefix DIR` works for any DIR. tests/install.cmake checks it end to end.
include(CMakePackageConfigHelpers)

set(CHORUS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/Chorus)

install(TARGETS chorus chorus_static EXPORT ChorusTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/chorus.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Header-only MPI bootstrap helper; OPTIONAL so an install never fails for want of it.
install(FILES ${PROJECT_SOURCE_DIR}/include/chorus_mpi.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    OPTIONAL)

install(EXPORT ChorusTargets NAMESPACE Chorus:: FILE ChorusTargets.cmake
    DESTINATION ${CHORUS_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ChorusConfig.cmake.in
    ${PROJECT_BINARY_DIR}/ChorusConfig.cmake INSTALL_DESTINATION ${CHORUS_INSTALL_CMAKEDIR}
    PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
# Before 1.0 a minor release may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ChorusConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ChorusConfig.cmake
    ${PROJECT_BINARY_DIR}/ChorusConfigVersion.cmake DESTINATION ${CHORUS_INSTALL_CMAKEDIR})

# chorus.pc: the prefix is computed from ${pcfiledir} (libdir/pkgconfig) unless the directories
# were given as absolute paths.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(CHORUS_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
    set(CHORUS_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
    set(CHORUS_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
    file(RELATIVE_PATH _chorus_pc_up "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
    string(REGEX REPLACE "/$" "" _chorus_pc_up "${_chorus_pc_up}")
    set(CHORUS_PC_PREFIX "\${pcfiledir}/${_chorus_pc_up}")
    set(CHORUS_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
    set(CHORUS_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/chorus.pc.in ${PROJECT_BINARY_DIR}/chorus.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/chorus.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
