# Lion (optim/lion.hpp) in every layout, against its serial run: ten steps of the tiny model of
# MICRO_RUN (mpi_tests.cmake) on data, tensor and pipeline parallelism and ZeRO 1-3 within 1e-5
# (losses and final weights), exact resume (bit for bit) and resharding of its one-moment
# checkpoints, and the refusal to resume one optimizer's state with the other.
#
# The family is Llama: Lion's update is the sign of an interpolation, so an element whose true
# gradient is exactly zero but whose computed gradient is rounding noise moves by +-lr with the
# noise's sign, which differs between summation orders. GPT-2's key bias is such an element
# (softmax ignores a constant added to every key), Llama has no biases; AdamW's layout tests
# damp the same noise with a large epsilon (mpi_tests.cmake), which Lion does not have.
set(LION_RUN --set train.optimizer=lion --set model.family=llama --set train.steps=10
             --set train.lr=3e-4 --set train.weight_decay=1.0 --set train.beta2=0.99)

add_test(NAME optim.lion_serial_reference
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} ${LION_RUN}
                 --out ${MPI_OUT}/lion_serial --overwrite)
set_tests_properties(optim.lion_serial_reference PROPERTIES FIXTURES_SETUP lion_serial_run)

function(lion_layout_test name ranks)
  add_test(NAME optim.${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=lion_serial
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${name} ${ranks} ${MICRO_RUN} ${LION_RUN}
                   ${ARGN})
  set_tests_properties(optim.${name} PROPERTIES FIXTURES_REQUIRED lion_serial_run
                                                PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
lion_layout_test(lion_dp2 2 --dp 2)
lion_layout_test(lion_dp2_zero1 2 --dp 2 --zero 1)
lion_layout_test(lion_dp2_zero2 2 --dp 2 --zero 2)
lion_layout_test(lion_dp2_zero3 2 --dp 2 --zero 3)
lion_layout_test(lion_tp2 2 --tp 2)
lion_layout_test(lion_pp2 2 --pp 2 --schedule 1f1b)

# Resume bit for bit in the same layout (fp32 sharded, bf16 master weights), and into others.
checkpoint_resume_test(lion_exact_dp2_zero3 0 "2 --dp 2 --zero 3" "2 --dp 2 --zero 3" 2
                       ${LION_RUN})
checkpoint_resume_test(lion_exact_bf16_dp2_zero1 0 "2 --dp 2 --zero 1" "2 --dp 2 --zero 1" 2
                       ${LION_RUN} --precision bf16)
checkpoint_resume_test(lion_reshard_tp2_dp2_zero1_to_pp2_dp2_zero2 1e-5
                       "4 --tp 2 --dp 2 --zero 1" "4 --pp 2 --dp 2 --zero 2" 4 ${LION_RUN})
checkpoint_resume_test(lion_reshard_serial_to_dp2_zero3 1e-5 "1" "2 --dp 2 --zero 3" 2
                       ${LION_RUN})

# An AdamW checkpoint resumed with Lion (the moments are not each other's): one line.
checkpoint_refused_test(other-optimizer
                        "holds adamw optimizer state, but this run uses train.optimizer = \"lion\""
                        --set train.optimizer=lion)
