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
# Every collective on device buffers (staged through pinned host memory), 2 and 4 processes on
# one GPU, in stream order.
if(MPI_C_FOUND)
  add_executable(test_cuda_coll test_cuda_coll.c)
  target_link_libraries(test_cuda_coll chorus MPI::MPI_C CUDA::cudart_static)
  foreach(n 2 4)
    chorus_add_test(NAME cuda_coll_${n} TIMEOUT 300 LABELS gpu mpi
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root -np ${n}
              $<TARGET_FILE:test_cuda_coll>)
  endforeach()
endif()
