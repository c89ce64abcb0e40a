# Bootstrap and environment fuzz targets (tests/fuzz/, libFuzzer's LLVMFuzzerTestOneInput):
#   fuzz_replay_boot_hello  a stranger's first bytes: root hello, peer hello, root reply, through
#                           the pure checks and the real root thread, rendezvous and rank listener
#   fuzz_replay_frame       frame streams after a valid hello, through a rank's service thread
#   fuzz_replay_env         environment values: the variable table, CHORUS_ALGO/PROTO, IFNAME
# Here each target replays its corpus (tests/fuzz/corpus/<target>/) once with tests/fuzz/
# replay_main.c as main, built with gcc under AddressSanitizer and UndefinedBehaviorSanitizer
# together with the library's own sources, so a bad read in bootstrap code fails the test. In a
# build that is sanitized as a whole (CHORUS_SANITIZE) they link the library as it is; without
# ASan they still replay, unchecked. scripts/fuzz.sh builds the same targets with clang's
# libFuzzer and grows the corpora.
include(CheckCSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
check_c_source_compiles("int main(void) { return 0; }" CHORUS_TEST_HAVE_ASAN_UBSAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)

set(_fuzz_own_copy OFF)
if(CHORUS_TEST_HAVE_ASAN_UBSAN AND NOT CMAKE_C_FLAGS MATCHES "-fsanitize")
    set(_fuzz_own_copy ON)
    set(_fuzz_flags -fsanitize=address,undefined -fno-sanitize-recover=all
        -fno-omit-frame-pointer)
    get_target_property(_fuzz_lib_sources chorus_obj SOURCES)
    # The library once more, instrumented; shared by the three replay drivers.
    add_library(chorus_fuzz_obj OBJECT ${_fuzz_lib_sources} fuzz/fuzz_common.c
        fuzz/replay_main.c)
    if(TARGET chorus_cuda_fatbin) # the kernels' generated source is among them
        add_dependencies(chorus_fuzz_obj chorus_cuda_fatbin)
    endif()
    target_compile_options(chorus_fuzz_obj PRIVATE ${_fuzz_flags})
    target_compile_definitions(chorus_fuzz_obj PRIVATE
        $<TARGET_PROPERTY:chorus_obj,COMPILE_DEFINITIONS>)
    target_include_directories(chorus_fuzz_obj PRIVATE
        $<TARGET_PROPERTY:chorus_obj,INCLUDE_DIRECTORIES>)
    target_link_libraries(chorus_fuzz_obj PRIVATE PkgConfig::HWLOC Threads::Threads)
endif()

foreach(t boot_hello frame env)
    if(_fuzz_own_copy)
        add_executable(fuzz_replay_${t} fuzz/fuzz_${t}.c $<TARGET_OBJECTS:chorus_fuzz_obj>)
        target_compile_options(fuzz_replay_${t} PRIVATE ${_fuzz_flags})
        target_include_directories(fuzz_replay_${t} PRIVATE
            $<TARGET_PROPERTY:chorus_obj,INCLUDE_DIRECTORIES>)
        target_link_options(fuzz_replay_${t} PRIVATE -fsanitize=address,undefined)
        target_link_libraries(fuzz_replay_${t} PRIVATE PkgConfig::HWLOC Threads::Threads
            ${CMAKE_DL_LIBS})
    else()
        add_executable(fuzz_replay_${t} fuzz/fuzz_${t}.c fuzz/fuzz_common.c fuzz/replay_main.c)
        target_link_libraries(fuzz_replay_${t} PRIVATE chorus_internal Threads::Threads)
    endif()
    chorus_add_test(NAME fuzz_replay_${t}
        COMMAND fuzz_replay_${t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/fuzz_${t}
        TIMEOUT 120 LABELS fuzz
        ENV ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
endforeach()
