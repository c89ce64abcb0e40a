# Fault injection (issue 5: dead and stuck peers, abort, init failures), LABELS faults. One driver,
# test_faults.c, one case per entry (see its header for what each proves):
#   faults_kill_{shm,net}_{4,8}   SIGKILL of rank 0, N/2 and N-1 mid-AllReduce, 20 trials each:
#                                 every survivor gets chorusRemoteError within 1 s (shm) / 5 s
#                                 (net, every rank its own CHORUS_HOSTID), naming the call and rank
#   faults_kill_p2p_shm_4         the same mid-group of sends round the ring, 10 trials each
#   faults_sigstop_{shm,net}      SIGSTOP of one of 4 ranks, CHORUS_TIMEOUT_MS=3000: chorusTimeout
#                                 in 2.7..6 s, naming the stopped rank (2 trials per victim)
#   faults_abort_{blocked,race,idle,busy}  chorusCommAbort from another thread, 100 trials each
#   faults_init_missing_{env,id}  rank 3 of 4 never starts: init fails within T + 2 s naming it
#   faults_init_root_dies         the root's process is killed during init: no rank hangs
# Run times on 2 shared cores when every trial passes: kill_shm_4 32 s, kill_net_4 40 s,
# kill_shm_8 44 s, kill_net_8 50 s, kill_p2p_shm_4 15 s, sigstop_* 29 s each, abort_* 2-9 s
# each, init_missing_* 14 s each (5 trials), init_root_dies 12 s (4 trials): about 5 minutes
# for the label. A failing kill or sigstop case stops after 3 failed trials, an init case after
# the first.
# RUN_SERIAL for the kill and abort cases: their bounds are timing bounds, and 4-8 busy processes
# on 2 cores are enough load. The sigstop and init cases mostly sleep (their survivors wait out a
# timeout) and share a slot: run beside three 5-8-rank coll_large tests, sigstop_shm's slowest
# survivor took 3312 ms (bound 2700-6000), and it, init_missing_env and init_root_dies took
# 30.6, 14.3 and 12.6 s, as alone (28.5, 14.1, 12.4 in .ci/run).
add_executable(test_faults test_faults.c)
target_link_libraries(test_faults chorus_test_harness)

# name:args:TIMEOUT
foreach(f_entry
    kill_shm_4:kill^shm^4:600 kill_net_4:kill^net^4:600
    kill_shm_8:kill^shm^8:900 kill_net_8:kill^net^8:900
    kill_p2p_shm_4:kill_p2p^shm^4:300
    sigstop_shm:sigstop^shm:180 sigstop_net:sigstop^net:180
    abort_blocked:abort^blocked:300 abort_race:abort^race:300
    abort_idle:abort^idle:300 abort_busy:abort^busy:300
    init_missing_env:init_missing^env:120 init_missing_id:init_missing^id:120
    init_root_dies:init_root_dies:120)
  string(REPLACE ":" ";" f_spec ${f_entry})
  list(GET f_spec 0 f_name)
  list(GET f_spec 1 f_args)
  list(GET f_spec 2 f_timeout)
  string(REPLACE "^" ";" f_args ${f_args})
  # The abort cases make ~1,000 refused calls, each logged at WARN: their FAIL lines carry the
  # texts that matter.
  set(f_env)
  if(f_name MATCHES "^abort_")
    set(f_env CHORUS_DEBUG=NONE)
  endif()
  chorus_add_test(NAME faults_${f_name} COMMAND test_faults ${f_args} TIMEOUT ${f_timeout}
    LABELS faults ENV ${f_env})
  if(f_name MATCHES "^(kill|abort)_")
    set_tests_properties(faults_${f_name} PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()
