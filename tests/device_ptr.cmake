# A build without CUDA refuses CUDA device pointers (detected through the driver, played here by a
# fake libcuda.so.1).
add_library(fake_cuda SHARED support/fake_libcuda.c)
set_target_properties(fake_cuda PROPERTIES OUTPUT_NAME cuda SOVERSION 1 VERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/fakecuda)
add_executable(test_device_ptr test_device_ptr.c)
target_link_libraries(test_device_ptr chorus_internal ${CMAKE_DL_LIBS})
add_dependencies(test_device_ptr fake_cuda) # loaded at run time: build it with the test
chorus_add_test(NAME device_ptr_refused TIMEOUT 60
  COMMAND test_device_ptr $<TARGET_FILE_DIR:fake_cuda>/libcuda.so.1)
# The driver loaded after the communicator's host calls, the device pointer passed at once.
chorus_add_test(NAME device_ptr_refused_late TIMEOUT 60
  COMMAND test_device_ptr $<TARGET_FILE_DIR:fake_cuda>/libcuda.so.1 late)
