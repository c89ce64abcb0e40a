# install_consumer: `cmake --install` of this build tree gives a package an outside program can use
# through find_package(Chorus) (shared and static) and through pkg-config chorus; each build runs
# on 2 ranks under mpirun. SKIP (77) without MPI. See tests/install_consumer/run.sh.
chorus_add_test(NAME install_consumer
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_consumer/run.sh ${PROJECT_BINARY_DIR}
        ${CMAKE_COMMAND}
    TIMEOUT 300
    LABELS install mpi)
