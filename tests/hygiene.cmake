# Resource hygiene and /dev/shm safety (issue 5, item 6), all in test_hygiene.c:
#   hygiene_loop        1000 x (init 4 thread ranks over shm, all-reduce, broadcast, all-gather,
#                       send/recv ring, destroy) in one process: fds, threads and /dev/shm entries
#                       equal after as after the warm-up, VmRSS within 1 MiB
#   hygiene_loop_net    the same, 1000 x 2 ranks on two simulated hosts (net transport: sockets,
#                       proxy thread)
#   hygiene_loop_mixed  the same, 4 ranks on two simulated hosts (shm inside each, net between)
#   shm_small           /dev/shm of 256 KiB / 5 MiB (private mount namespace): init fails with an
#                       error naming /dev/shm and the bytes needed, never SIGBUS; 4 KiB FIFOs fit.
#                       SKIP without root (unshare, mount)
#   shm_sigkill         22 jobs of 4 processes SIGKILLed mid-run and during init: no
#                       /dev/shm/chorus-<pid>-* left by a job killed after init; the next job
#                       sweeps what one killed during init left
# The loops run with 64 KiB FIFOs: resources are the same at any FIFO size, and 4 MiB ones spend
# 150 ms of each iteration zeroing memory. Times on two loaded cores: 21-25 s, 12-25 s, 22 s,
# shm_small 0.3 s (20 s while a rank retries a closed peer until CHORUS_TIMEOUT_MS), 9-12 s.
add_executable(test_hygiene test_hygiene.c)
target_link_libraries(test_hygiene chorus_test_harness)
set(_hygiene_env CHORUS_BUFFSIZE=64K CHORUS_P2P_BUFFSIZE=64K)
chorus_add_test(NAME hygiene_loop COMMAND test_hygiene loop shm 4 1000 TIMEOUT 300
    LABELS hygiene ENV ${_hygiene_env})
chorus_add_test(NAME hygiene_loop_net COMMAND test_hygiene loop net 2 1000 TIMEOUT 300
    LABELS hygiene net ENV ${_hygiene_env})
chorus_add_test(NAME hygiene_loop_mixed COMMAND test_hygiene loop net 4 1000 TIMEOUT 300
    LABELS hygiene net ENV ${_hygiene_env})
chorus_add_test(NAME shm_small COMMAND test_hygiene smallshm TIMEOUT 120 LABELS hygiene)
chorus_add_test(NAME shm_sigkill COMMAND test_hygiene sigkill 22 TIMEOUT 240 LABELS hygiene)
