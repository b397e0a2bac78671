# What a user of another framework expects on day one (docs/metrics.md, docs/checkpoints.md):
# TensorBoard event files, `kintsugi eval`, and resume that cannot go wrong. On MICRO_RUN's tiny
# model (mpi_tests.cmake).
set(USE_OUT ${CMAKE_CURRENT_BINARY_DIR}/use-runs)

add_test(NAME use.tensorboard
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/tensorboard.sh $<TARGET_FILE:kintsugi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_tfevents.py ${USE_OUT}/tensorboard
                 ${MICRO_RUN})
set_tests_properties(use.tensorboard PROPERTIES PROCESSORS 2 TIMEOUT 120)
