# Host memops backend: reduce/divide for every dtype x op, float16/bfloat16 conversions, F16C vs
# portable (kernels/host_memops.c, kernels/host_reduce.c). CPU only; runs in about a second.
add_executable(test_reduce test_reduce.c)
# m: the test's reference rounding uses ldexp, frexp and rint. CHECK and the PASS/FAIL lines come
# from chorus_test_harness (functional.cmake).
target_link_libraries(test_reduce chorus_test_harness m)
chorus_add_test(NAME reduce_unit COMMAND test_reduce TIMEOUT 60)
