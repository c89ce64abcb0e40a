# The tuner (src/tuning.c): CHORUS_ALGO / CHORUS_PROTO parsers, the alpha-beta model's sanity,
# tune_init and tune_log. A pure function of its inputs: CPU only, no communicator, under a second.
add_executable(tuning_test tuning_test.c)
target_link_libraries(tuning_test chorus_test_harness)
chorus_add_test(NAME tuning COMMAND tuning_test TIMEOUT 30 LABELS tuning)
