# chorus-train's math, each piece alone (trainer/nn.h), CPU only, each well under 10 s:
#   trainer_nn          model.c: layers against plain loops and finite differences, layout, init
#   trainer_nn_syncbn   model.c: SyncBatchNorm on Chorus thread ranks against the full batch
#   trainer_nn_sampler  sampler.c: each index once per epoch, N-rank step = 1-rank step
#   trainer_nn_optim    optim.c: SGD/AdamW steps against hand-computed values, LR schedule
#   trainer_nn_data     data.c: corrupt and missing IDX files, the real Fashion-MNIST when present
# CHECK, PASS/FAIL lines and thread ranks come from chorus_test_harness (functional.cmake).
if(TARGET chorus_nn)
  add_executable(test_trainer_nn test_trainer_nn.c)
  target_link_libraries(test_trainer_nn chorus_nn chorus_test_harness)
  chorus_add_test(NAME trainer_nn COMMAND test_trainer_nn TIMEOUT 120 LABELS trainer)
  foreach(part syncbn sampler optim data)
    add_executable(test_trainer_${part} test_trainer_${part}.c)
    target_link_libraries(test_trainer_${part} chorus_nn chorus_test_harness)
    chorus_add_test(NAME trainer_nn_${part} COMMAND test_trainer_${part} TIMEOUT 120
      LABELS trainer)
  endforeach()
endif()
