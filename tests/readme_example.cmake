# readme_example*: the C example in README.md (its first ```c block) builds against the library
# and runs as the README says: one process alone, several processes joined by CHORUS_* variables,
# and by torchrun's variables. Each run checks every rank's printed result against the closed form.
set(_readme ${PROJECT_SOURCE_DIR}/README.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_readme})
file(READ ${_readme} _text)
string(FIND "${_text}" "```c\n" _begin)
if(_begin EQUAL -1)
    message(FATAL_ERROR "README.md has no ```c block (tests/readme_example.cmake compiles it)")
endif()
math(EXPR _begin "${_begin} + 5")
string(SUBSTRING "${_text}" ${_begin} -1 _text)
string(FIND "${_text}" "```" _end)
string(SUBSTRING "${_text}" 0 ${_end} _text)
# Written only when it changed, so a reconfigure does not rebuild the example.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/readme_example.c.new "${_text}")
configure_file(${CMAKE_CURRENT_BINARY_DIR}/readme_example.c.new
    ${CMAKE_CURRENT_BINARY_DIR}/readme_example.c COPYONLY)

add_executable(readme_example ${CMAKE_CURRENT_BINARY_DIR}/readme_example.c)
target_include_directories(readme_example PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(readme_example PRIVATE chorus)

# The driver: readme_example.sh MODE NRANKS EXE, MODE chorus (CHORUS_RANK/NRANKS/ROOT) or torchrun
# (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT). The example all-reduces {1, 2, 3, rank}, so rank r of
# n must print "rank r of n: n 2n 3n n(n-1)/2". The port is picked from the driver's pid, below the
# ephemeral range, so parallel tests do not collide; where another test holds it all the same (rank
# 0 says it cannot listen there: once in a ctest -j2 run of 2026-12-06), the others are stopped and
# the run starts again on another port, three tries at most.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/readme_example.sh [==[
#!/usr/bin/env bash
set -u
mode=$1 n=$2 exe=$3
unset CHORUS_RANK CHORUS_NRANKS CHORUS_ROOT RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for try in 1 2 3; do
    port=$((20000 + ($$ + 4099 * (try - 1)) % 12000))
    pids=()
    for ((r = n - 1; r >= 0; r--)); do
        if [ "$mode" = torchrun ]; then
            env RANK="$r" WORLD_SIZE="$n" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
                timeout 50 "$exe" >"$dir/out.$r" 2>&1 &
        else
            env CHORUS_RANK="$r" CHORUS_NRANKS="$n" CHORUS_ROOT="127.0.0.1:$port" \
                timeout 50 "$exe" >"$dir/out.$r" 2>&1 &
        fi
        pids[r]=$!
    done
    wait "${pids[0]}"
    rc0=$?
    if [ $rc0 -eq 0 ] || ! grep -q "cannot listen on 127.0.0.1:$port" "$dir/out.0"; then
        break
    fi
    echo "try $try: port $port is taken; again on another"
    kill "${pids[@]:1}" 2>/dev/null
    wait "${pids[@]:1}" 2>/dev/null
done
status=0
for ((r = 0; r < n; r++)); do
    if [ "$r" -eq 0 ]; then
        rc=$rc0
    else
        wait "${pids[r]}"
        rc=$?
    fi
    [ $rc -eq 0 ] || { echo "rank $r exited with $rc"; status=1; }
    cat "$dir/out.$r"
    want="rank $r of $n: $n $((2 * n)) $((3 * n)) $((n * (n - 1) / 2))"
    grep -qxF "$want" "$dir/out.$r" || { echo "rank $r: want \"$want\""; status=1; }
done
[ $status -eq 0 ] && echo PASS
exit $status
]==])
file(CHMOD ${CMAKE_CURRENT_BINARY_DIR}/readme_example.sh PERMISSIONS OWNER_READ OWNER_WRITE
    OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

set(_driver ${CMAKE_CURRENT_BINARY_DIR}/readme_example.sh)
chorus_add_test(NAME readme_example
    COMMAND ${_driver} chorus 1 $<TARGET_FILE:readme_example> TIMEOUT 60 LABELS readme)
chorus_add_test(NAME readme_example_3ranks
    COMMAND ${_driver} chorus 3 $<TARGET_FILE:readme_example> TIMEOUT 60 LABELS readme)
chorus_add_test(NAME readme_example_torchrun
    COMMAND ${_driver} torchrun 2 $<TARGET_FILE:readme_example> TIMEOUT 60 LABELS readme)
