# What a user of another framework expects on day one (docs/metrics.md, docs/checkpoints.md):
# TensorBoard event files, `kintsugi eval`, and resume that cannot go wrong. On MICRO_RUN's tiny
# model (mpi_tests.cmake).
set(USE_OUT ${CMAKE_CURRENT_BINARY_DIR}/use-runs)

add_test(NAME use.tensorboard
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/tensorboard.sh $<TARGET_FILE:kintsugi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_tfevents.py ${USE_OUT}/tensorboard
                 ${MICRO_RUN})
set_tests_properties(use.tensorboard PROPERTIES PROCESSORS 2 TIMEOUT 120)

# `kintsugi eval` against the validation loss of the serial checkpoint run
# (checkpoint_tests.cmake: train.eval_batches 3 x train.micro_batch 1 = 3 windows).
add_test(NAME use.eval_equals_validation
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/eval.sh $<TARGET_FILE:kintsugi>
                 ${CKPT_OUT}/exact_serial/full ${TEST_VAL} 3
                 ${TEST_TOKENIZER} ${MPI_DATA}/brown/val.txt)
set_tests_properties(use.eval_equals_validation PROPERTIES FIXTURES_REQUIRED serial_checkpoint
                                                          PROCESSORS 2 TIMEOUT 180)
add_test(NAME use.error.eval_needs_weights
         COMMAND ${EXPECT_ERROR} "eval needs either --checkpoint DIR"
                 ${KINTSUGI_BIN} eval --data ${TEST_VAL})

add_test(NAME use.resume_guard
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/resume_guard.sh $<TARGET_FILE:kintsugi>
                 ${EXPECT_ERROR} ${USE_OUT}/resume_guard ${MICRO_RUN})
set_tests_properties(use.resume_guard PROPERTIES TIMEOUT 180)

# Every --help shows the defaults.
add_test(NAME use.help_shows_defaults COMMAND ${KINTSUGI_BIN} generate --help)
set_tests_properties(use.help_shows_defaults PROPERTIES PASS_REGULAR_EXPRESSION
                     "--tokens [^\n]*=100.*--temperature [^\n]*=0.8")

# eval --init-from takes what train --init-from takes: a Hugging Face file and folder, the run's
# model/ and its training checkpoint.
add_test(NAME use.eval_init_from
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/eval_init_from.sh $<TARGET_FILE:kintsugi>
                 ${CKPT_OUT}/export_import/a ${CKPT_OUT}/export_import/hf/model.safetensors
                 ${TEST_VAL} ${MICRO_RUN})
set_tests_properties(use.eval_init_from PROPERTIES FIXTURES_REQUIRED hf_export TIMEOUT 60)

# generate from a saved model (with the tokenizer it carries) and from a training checkpoint.
add_test(NAME use.generate_from_either_checkpoint
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/generate_checkpoints.sh $<TARGET_FILE:kintsugi>
                 ${EXPECT_ERROR} ${USE_OUT}/generate ${TEST_TOKENIZER} ${MICRO_RUN})
set_tests_properties(use.generate_from_either_checkpoint PROPERTIES TIMEOUT 120)
# generate on Llama 2's tokenizer: the words keep their spaces.
add_test(NAME use.generate_sentencepiece_spaces
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/generate_spaces.sh $<TARGET_FILE:kintsugi>
                 ${USE_OUT}/generate_spaces ${MPI_DATA} ${MICRO_RUN})
set_tests_properties(use.generate_sentencepiece_spaces PROPERTIES TIMEOUT 120)
