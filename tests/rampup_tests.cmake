# Batch-size ramp-up (train/batch_rampup.hpp): a ramped run on 4 ranks (dp 2 x pp 2) against the
# serial ramped run (relative 1e-5 over 15 steps), each resumed mid-ramp bit for bit, with the
# tiny model of MICRO_RUN (mpi_tests.cmake); and a ramp whose batches do not split over the
# layout, refused before any work.
set(RAMP_RUN ${MICRO_RUN} --set train.steps=15)
# Global batch 8 from 2 by 2 over 24 samples: batches 2 2 2 2 4 4 6 6 8 ...; the checkpoint of
# step 5 comes right after the first increase.
add_test(NAME rampup.dp2_pp2_vs_serial
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rampup/ramped_run.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${MPI_OUT} 4 "--dp 2 --pp 2" "2,2,24" 5 ${RAMP_RUN})
set_tests_properties(rampup.dp2_pp2_vs_serial PROPERTIES PROCESSORS 4 TIMEOUT 600)
# The square-root learning-rate rule, with the interleaved schedule (its micro-batches per
# rank must stay a multiple of pp along the ramp: 2, 4).
add_test(NAME rampup.dp2_pp2_interleaved_sqrt_lr
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rampup/ramped_run.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${MPI_OUT} 4
                 "--dp 2 --pp 2 --schedule interleaved --virtual-stages 2" "4,4,16" 3 ${RAMP_RUN}
                 --set train.batch_lr_rule=sqrt --set train.steps=8)
set_tests_properties(rampup.dp2_pp2_interleaved_sqrt_lr PROPERTIES PROCESSORS 4 TIMEOUT 600)
# Batches 2 5 8 with micro-batch 2: 5 does not split.
add_test(NAME rampup.error_batch_does_not_split
         COMMAND ${EXPECT_ERROR}
                 "train.batch_rampup passes through a global batch of 5: train.global_batch = 5 is not a multiple of train.micro_batch x dp = 2 x 1"
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set train.micro_batch=2
                 --set "train.batch_rampup=[2,3,24]" --out ${MPI_OUT}/rampup/refused)
add_test(NAME rampup.error_does_not_reach_global_batch
         COMMAND ${EXPECT_ERROR} "train.batch_rampup: train.global_batch 8 - start 3 = 5 is not a multiple of the increment 2"
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set "train.batch_rampup=[3,2,24]"
                 --out ${MPI_OUT}/rampup/refused)

# Measured energy through the trainer on a fake RAPL package (docs/energy.md): metrics.jsonl and
# TensorBoard keys, and ranks sharing one package counting it once.
add_test(NAME energy.fake_rapl_serial_and_dp2
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rampup/energy_fake_rapl.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT} ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_tfevents.py ${MICRO_RUN}
                 --set train.eval_every=2)
# Its runs mostly sleep (micro-batches slowed for the counter): one processor.
set_tests_properties(energy.fake_rapl_serial_and_dp2 PROPERTIES
                     PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 300)
