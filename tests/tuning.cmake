# The tuner (src/tuning.c): CHORUS_ALGO / CHORUS_PROTO parsers, the alpha-beta model's sanity,
# tune_init and tune_log. A pure function of its inputs: CPU only, no communicator, under a second.
add_executable(tuning_test tuning_test.c)
target_link_libraries(tuning_test chorus_test_harness)
chorus_add_test(NAME tuning COMMAND tuning_test TIMEOUT 30 LABELS tuning)

# The send slots' plain or streaming stores, chosen at run time (src/slot_adapt.c), fed made-up
# call times. A pure function of its inputs.
add_executable(test_slot_adapt test_slot_adapt.c)
target_link_libraries(test_slot_adapt chorus_test_harness)
chorus_add_test(NAME slot_adapt COMMAND test_slot_adapt TIMEOUT 30 LABELS tuning)

# The same choices end to end (the slot plan over the ring, the window plan in one-shot calls):
# three thread ranks on one CPU, real calls, their streamed times scaled by CHORUS_ADAPT_TIMED_PCT
# so that each plan must choose one way.
add_executable(test_adapt_plans test_adapt_plans.c)
target_link_libraries(test_adapt_plans chorus_test_harness)
chorus_add_test(NAME adapt_plans_threads_3 COMMAND test_adapt_plans TIMEOUT 120 LABELS tuning)
