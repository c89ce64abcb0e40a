# Bootstrap under attack, and jobs side by side (issue 5); the ranks are forked processes:
#   boot_flood              4 ranks init while a stranger floods the root (in the parent, as a
#                           launcher's chorusGetUniqueId) with 2,000+ bad connections: resets,
#                           0..7 bytes, wrong magic or secret, 2^31 frames, random bytes, ranks out
#                           of range, 300 silent held to the end; then it attacks every rank's own
#                           listener (correct-secret hellos with ranks -1, 4, INT_MAX, then 2^31
#                           frames); the ranks all-reduce exactly and destroy
#   boot_flood_lowfd        the root's process at RLIMIT_NOFILE 200, 400 silent connections kept
#                           open (each one the root drops reopened): the root survives EMFILE and
#                           the ranks get through
#   boot_flood_lowfd_rank0  the same with the root in rank 0's process (rank 0 makes the id, the
#                           MPI pattern): the silent connections must not take the
#                           descriptors rank 0's own init needs (the pending set is capped at a
#                           quarter of RLIMIT_NOFILE, and on EMFILE the oldest pending goes first)
#   two_jobs_shm            two 4-rank jobs at once, own ids and data: each gets exactly its own
#   two_jobs_net            sums and all-gather; _net: rank r of both jobs has the same
#                           CHORUS_HOSTID=twojobs-host<r>, so every connection is a net one
# Each takes under 10 s here (1-2 s when the machine is quiet).
add_executable(test_boot_flood test_boot_flood.c)
target_link_libraries(test_boot_flood chorus_test_harness)
chorus_add_test(NAME boot_flood COMMAND test_boot_flood flood TIMEOUT 90 LABELS boot)
chorus_add_test(NAME boot_flood_lowfd COMMAND test_boot_flood lowfd TIMEOUT 90 LABELS boot)
chorus_add_test(NAME boot_flood_lowfd_rank0 COMMAND test_boot_flood lowfd-rank0 TIMEOUT 90
    LABELS boot)

add_executable(test_two_jobs test_two_jobs.c)
target_link_libraries(test_two_jobs chorus_test_harness)
foreach(m shm net)
    chorus_add_test(NAME two_jobs_${m} COMMAND test_two_jobs ${m} TIMEOUT 90 LABELS boot)
endforeach()
