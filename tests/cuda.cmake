# GPU tests (CUDA builds only): each exits 77 (SKIP) without a CUDA device; scripts/gpu-check.sh
# runs them on a machine with one.
if(NOT CHORUS_HAVE_CUDA)
  return()
endif()
# The CUDA memops kernels against the host backend, bit for bit.
add_executable(test_cuda_memops test_cuda_memops.c)
target_link_libraries(test_cuda_memops chorus_internal chorus_cuda)
chorus_add_test(NAME cuda_memops TIMEOUT 300 COMMAND test_cuda_memops LABELS gpu)
# Memory-type detection with the real driver: device buffers refused, pinned/managed host used.
add_executable(test_cuda_device_ptr test_cuda_device_ptr.c)
target_link_libraries(test_cuda_device_ptr chorus CUDA::cudart_static)
chorus_add_test(NAME cuda_device_ptr TIMEOUT 60 COMMAND test_cuda_device_ptr LABELS gpu)
# Every collective on device buffers, 2 and 4 processes on one GPU, in stream order: compute
# kernels write each input before the call and read each result after it on the same stream.
if(MPI_C_FOUND)
  add_library(test_cuda_order_kernels STATIC support/cuda_order_kernels.cu)
  set_target_properties(test_cuda_order_kernels PROPERTIES CUDA_STANDARD 17)
  target_link_libraries(test_cuda_order_kernels PUBLIC CUDA::cudart_static)
  add_executable(test_cuda_coll test_cuda_coll.c)
  target_link_libraries(test_cuda_coll chorus MPI::MPI_C test_cuda_order_kernels)
  foreach(n 2 4)
    chorus_add_test(NAME cuda_coll_${n} TIMEOUT 300 LABELS gpu mpi
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:test_cuda_coll>)
  endforeach()
endif()
# Device buffers on every machine: the same test against a fake driver whose device memory
# faults on direct access (tests/support/fake_cuda_stage.c).
# Its kernels are the host backend's code, built in with hidden symbols (bit-identical results).
add_library(fake_cuda_stage SHARED support/fake_cuda_stage.c support/fake_cuda_mem.c
  support/fake_cuda_kernels.c support/fake_cuda_dev.c
  ${PROJECT_SOURCE_DIR}/kernels/host_reduce.c ${PROJECT_SOURCE_DIR}/kernels/host_memops.c)
target_include_directories(fake_cuda_stage PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/kernels)
set_target_properties(fake_cuda_stage PROPERTIES OUTPUT_NAME cuda SOVERSION 1 VERSION 1
  C_VISIBILITY_PRESET hidden LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fakecuda_stage)
if(MPI_C_FOUND)
  add_executable(test_cuda_stage test_cuda_coll.c support/devbuf_fake.c)
  target_compile_definitions(test_cuda_stage PRIVATE TEST_FAKE_CUDA)
  target_link_libraries(test_cuda_stage chorus MPI::MPI_C ${CMAKE_DL_LIBS})
  add_dependencies(test_cuda_stage fake_cuda_stage) # loaded at run time: build it with the test
  # Both paths: staged through host memory (cuda_stage), GPU to GPU over cuda_p2p (cuda_p2p),
  # the latter also with the caller waiting for its stream (CHORUS_CUDA_ASYNC=0); every rank on
  # the fake's one GPU, or (TEST_CUDA_GPUS) on GPUs of their own: numbered 0 in each process or
  # hidden from each other (GPU to GPU by default, told apart by bus id; IPC opens memory of a
  # GPU the process does not see), or without peer access (staged, even where
  # CHORUS_CUDA_P2P=1 asks for GPU to GPU).
  foreach(t stage_2:0:1:shared stage_4:0:1:shared p2p_2:1:1:shared p2p_4:1:1:shared
      p2p_blocking_2:1:0:shared gpus_rotated_2:-1:1:rotated gpus_isolated_2:-1:1:isolated
      gpus_nopeer_2:-1:1:nopeer)
    string(REPLACE ":" ";" f ${t})
    list(GET f 0 name)
    list(GET f 1 p2p)
    list(GET f 2 async)
    list(GET f 3 gpus)
    set(gpus_env)
    if(NOT gpus STREQUAL "shared")
      set(gpus_env TEST_CUDA_GPUS=${gpus})
    endif()
    string(REGEX REPLACE ".*_" "" n ${name})
    chorus_add_test(NAME cuda_${name} TIMEOUT 300 LABELS mpi
      ENV CHORUS_CUDA_P2P=${p2p} CHORUS_CUDA_ASYNC=${async} ${gpus_env}
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:test_cuda_stage> $<TARGET_FILE_DIR:fake_cuda_stage>/libcuda.so.1)
  endforeach()
endif()

# The collectives' correctness matrix (coll_matrix.c) on device buffers, on a GPU (label gpu,
# SKIP without one) and on the fake driver (every machine): staged, and GPU to GPU with 512-byte
# FIFO slots so that 1031 elements cross many of them.
if(MPI_C_FOUND)
  add_executable(coll_matrix_cuda coll_matrix.c support/devbuf_cuda.c)
  target_compile_definitions(coll_matrix_cuda PRIVATE WITH_MPI WITH_DEVBUF)
  target_link_libraries(coll_matrix_cuda chorus_internal MPI::MPI_C CUDA::cudart_static)
  chorus_add_test(NAME cuda_matrix_2 TIMEOUT 300 LABELS gpu mpi
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np 2
            $<TARGET_FILE:coll_matrix_cuda> --counts 0,1,7,1031)
  add_executable(coll_matrix_fake coll_matrix.c support/devbuf_fake.c)
  target_compile_definitions(coll_matrix_fake PRIVATE WITH_MPI WITH_DEVBUF)
  target_link_libraries(coll_matrix_fake chorus_internal MPI::MPI_C ${CMAKE_DL_LIBS})
  add_dependencies(coll_matrix_fake fake_cuda_stage)
  foreach(t stage_3:0 p2p_3:1)
    string(REPLACE ":" ";" f ${t})
    list(GET f 0 name)
    list(GET f 1 p2p)
    string(REGEX REPLACE ".*_" "" n ${name})
    chorus_add_test(NAME cuda_matrix_fake_${name} TIMEOUT 600 LABELS mpi
      ENV CHORUS_CUDA_P2P=${p2p} CHORUS_BUFFSIZE=4096
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:coll_matrix_fake> --counts 0,1,7,1031
              --driver $<TARGET_FILE_DIR:fake_cuda_stage>/libcuda.so.1)
  endforeach()
endif()
