# Multi-rank tests: CTest launches `mpirun -np N --oversubscribe`. Every layout (data, tensor,
# sequence and pipeline parallelism with each schedule, and 3D) trains the same tiny 4-layer GPT
# from the same seed and data as one process, and must end with the same losses and weights
# (relative 1e-5) and move exactly the theoretical number of bytes.
#
# AdamW's epsilon is 1e-4 here, not 1e-8: Adam divides each gradient by its own running RMS, so
# an element whose gradient is at the fp32 rounding floor (the key bias, whose true gradient is
# exactly zero, is one) gets an lr-sized update made of rounding noise, which differs between any
# two summation orders. A gradient difference dg moves an update by at most lr dg / (4 eps);
# with gradients differing by ~1e-9 between layouts, eps = 1e-4 keeps that well under the
# tolerance, and the weights compare what the layouts computed (docs/parallelism.md).
#
# Four steps is the horizon: longer runs drift apart by rounding that AdamW amplifies, as far as
# the serial run drifts from itself with another micro-batch (measured per family over 20 steps
# and on the shipped configs: docs/parallelism.md, "How long layouts agree").
find_program(MPIRUN mpirun REQUIRED)
# CTest's PROCESSORS is the number of ranks a test runs, except for the tests whose ranks mostly
# wait: those refused at validation (most of their ~2 s is mpirun's start and its 1-s delay
# before it kills the other ranks once one has exited with an error; ~0.6 CPU-s measured), and
# those that wait on a deadline, a stopped or killed rank, or a signal. They take one processor,
# so that CTest runs another test beside them instead of leaving the second core idle.
set(MPI_WAITING_PROCESSORS 1)
set(MPI_OUT ${CMAKE_CURRENT_BINARY_DIR}/mpi-runs)
set(MPI_DATA ${PROJECT_SOURCE_DIR}/data)
# The tests' tokenizer: GPT-2's BPE cut at 512 ids (scripts/fetch_data.sh). With GPT-2's 50257
# ids the embedding and LM head were ~94% of the micro model's 3.4M parameters and most of its
# FLOPs, and every checkpoint of it was ~40 MB; at 512 ids the blocks dominate, as in a real
# model, and a run takes a fraction of the time and disk (docs/architecture.md, "The test suite").
set(TEST_TOKENIZER ${MPI_DATA}/gpt2-512-tokenizer)
set(TEST_TRAIN ${MPI_DATA}/brown/gpt2-512/train.bin)
set(TEST_VAL ${MPI_DATA}/brown/gpt2-512/val.bin)
set(TEST_DATA --set data.train=${TEST_TRAIN} --set data.val=${TEST_VAL}
              --set data.tokenizer=${TEST_TOKENIZER} --set model.vocab_size=512)
set(TEST_SCHEDULE
    --set train.global_batch=8 --set train.micro_batch=1 --set train.steps=4
    --set train.warmup_steps=1 --set train.eval_every=0 --set train.eval_batches=3
    --set train.log_every=1 --set train.eps=1e-4 --set parallel.bucket_mib=0.5)
set(MICRO_RUN
    --config ${PROJECT_SOURCE_DIR}/configs/gpt-tiny.toml ${TEST_DATA}
    --set model.n_layer=4 --set model.d_model=64 --set model.n_head=4 --set model.seq_len=32
    ${TEST_SCHEDULE})

# The serial references pass --overwrite: CTest may run them again in the same build tree, and
# `kintsugi train` refuses an output directory that holds an earlier run (docs/checkpoints.md).
add_test(NAME mpi.serial_reference
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --out ${MPI_OUT}/serial --overwrite)
set_tests_properties(mpi.serial_reference PROPERTIES FIXTURES_SETUP serial_run)

function(mpi_layout_test name ranks)
  add_test(NAME mpi.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${name} ${ranks} ${MICRO_RUN} ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES FIXTURES_REQUIRED serial_run PROCESSORS ${ranks}
                                              TIMEOUT 300)
endfunction()
mpi_layout_test(dp2 2 --dp 2)
mpi_layout_test(dp4 4 --dp 4)
mpi_layout_test(tp2 2 --tp 2)
mpi_layout_test(tp4 4 --tp 4)
mpi_layout_test(tp2_sp 2 --tp 2 --sequence-parallel)
mpi_layout_test(dp2_tp2 4 --tp 2 --dp 2)
mpi_layout_test(dp2_tp2_sp 4 --tp 2 --dp 2 --sequence-parallel)
mpi_layout_test(pp2_gpipe 2 --pp 2 --schedule gpipe)
mpi_layout_test(pp2_1f1b 2 --pp 2 --schedule 1f1b)
mpi_layout_test(pp2_interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2)
mpi_layout_test(pp4_gpipe 4 --pp 4 --schedule gpipe)
mpi_layout_test(pp4_1f1b 4 --pp 4 --schedule 1f1b)
mpi_layout_test(pp4_interleaved 4 --pp 4 --schedule interleaved)
mpi_layout_test(tp2_pp2_dp2 8 --tp 2 --pp 2 --dp 2)
mpi_layout_test(tp2_pp2_dp2_sp 8 --tp 2 --pp 2 --dp 2 --sequence-parallel)

add_test(NAME mpi.killed_rank_ends_job
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_killed_rank_ends_job.sh
                 $<TARGET_FILE:kintsugi> ${MPI_OUT} ${MICRO_RUN} --set train.steps=20)
set_tests_properties(mpi.killed_rank_ends_job PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                     TIMEOUT 180)

# A stopped rank (SIGSTOP) ends the job within comm.timeout_s plus the diagnosis, with one
# message naming the group, the operation and the rank that did not answer (docs/parallelism.md).
# When two ranks time out together, exactly one of them speaks (stall_watch.hpp); under a full
# parallel CTest run the tp2 x dp2 case once ended with both silent, a bug since fixed.
function(mpi_stall_test name stalled)
  add_test(NAME mpi.stalled_rank_ends_job_${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_stalled_rank_ends_job.sh
                   $<TARGET_FILE:kintsugi> ${MPI_OUT} stalled_${name} 4 ${stalled} ${MICRO_RUN}
                   --set train.steps=100000 --set comm.timeout_s=3 ${ARGN})
  set_tests_properties(mpi.stalled_rank_ends_job_${name} PROPERTIES
                       PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 240)
endfunction()
mpi_stall_test(tp2_dp2 3 --tp 2 --dp 2)
mpi_stall_test(pp2_dp2 2 --pp 2 --dp 2)

# A rank stopped while the job starts, before MPI_Init or between it and the node split, ends the
# job after KINTSUGI_STARTUP_TIMEOUT_S (5 s here) with one message; without the startup deadline
# the job hangs forever (comm/mpi/startup_deadline.hpp).
foreach(where init split)
  add_test(NAME mpi.stopped_at_start_ends_job_${where}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_stopped_at_start_ends_job.sh
                   $<TARGET_FILE:kintsugi> ${MPI_OUT} ${where} ${MICRO_RUN})
  set_tests_properties(mpi.stopped_at_start_ends_job_${where} PROPERTIES
                       PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 180)
endforeach()

# A certain deadlock (every rank waiting for an operation that no waiting rank has posted) ends
# the job within seconds, not after comm.timeout_s (600 s by default), with one message naming
# what every rank waits for; ranks that wait in different operations while one computes are not
# a deadlock, and their job finishes (docs/parallelism.md).
add_executable(deadlock_test mpi/deadlock_test.cpp)
target_link_libraries(deadlock_test PRIVATE kintsugi_lib)
add_test(NAME mpi.deadlock_ends_job
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_deadlock_ends_job.sh
                 $<TARGET_FILE:deadlock_test>)
add_test(NAME mpi.waiting_while_a_rank_computes_is_no_deadlock
         COMMAND ${CMAKE_COMMAND} -E env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                 OMP_NUM_THREADS=1 ${MPIRUN} -np 4 --oversubscribe --bind-to none
                 $<TARGET_FILE:deadlock_test> busy)
set_tests_properties(mpi.deadlock_ends_job PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                  TIMEOUT 150)
# Its waiting ranks poll: four processors.
set_tests_properties(mpi.waiting_while_a_rank_computes_is_no_deadlock PROPERTIES PROCESSORS 4
                                                                              TIMEOUT 150)
set_tests_properties(mpi.waiting_while_a_rank_computes_is_no_deadlock PROPERTIES
                     PASS_REGULAR_EXPRESSION "busy: every rank finished"
                     FAIL_REGULAR_EXPRESSION "deadlock")

add_executable(collectives_test mpi/collectives_test.cpp)
target_link_libraries(collectives_test PRIVATE kintsugi_lib)
target_include_directories(collectives_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})  # support/
add_test(NAME mpi.collectives_3_ranks
         COMMAND ${MPIRUN} -np 3 --oversubscribe --bind-to none $<TARGET_FILE:collectives_test>)
add_test(NAME mpi.collectives_2_ranks
         COMMAND ${MPIRUN} -np 2 --oversubscribe --bind-to none $<TARGET_FILE:collectives_test>)
set_tests_properties(mpi.collectives_2_ranks PROPERTIES PROCESSORS 2 TIMEOUT 120
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
# The same on 4 ranks with the library's own reduce-scatter (the way kintsugi no longer takes by
# default, kept selectable: comm/mpi/mpi_communicator.cpp).
add_test(NAME mpi.collectives_4_ranks_library_reduce_scatter
         COMMAND ${MPIRUN} -np 4 --oversubscribe --bind-to none -x KINTSUGI_MPI_REDUCE_SCATTER
                 $<TARGET_FILE:collectives_test>)
set_tests_properties(mpi.collectives_3_ranks PROPERTIES PROCESSORS 3 TIMEOUT 120
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
set_tests_properties(mpi.collectives_4_ranks_library_reduce_scatter PROPERTIES PROCESSORS 4
                     TIMEOUT 120 ENVIRONMENT
                     "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;KINTSUGI_MPI_REDUCE_SCATTER=library")

# Bad input under mpirun: one message (from one rank), non-zero exit, no hang.
set(MPI_ENV ${CMAKE_COMMAND} -E env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
            OMP_NUM_THREADS=1)
add_test(NAME mpi.error.world_not_a_multiple_of_tp
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "the job has 2 ranks, not a multiple of tp 3"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --tp 3)
add_test(NAME mpi.error.heads_not_divisible_by_tp
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "model.n_head = 4 is not divisible by tp = 3"
                 ${MPIRUN} -q -np 3 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --tp 3)
add_test(NAME mpi.error.batch_not_divisible_by_dp
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "train.global_batch = 8 is not a multiple of train.micro_batch x dp = 1 x 3"
                 ${MPIRUN} -q -np 3 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN})
add_test(NAME mpi.error.missing_token_file
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh "nope.bin"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --set data.train=nope.bin)
set_tests_properties(mpi.error.world_not_a_multiple_of_tp mpi.error.heads_not_divisible_by_tp
                     mpi.error.batch_not_divisible_by_dp mpi.error.missing_token_file
                     PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 60)

# Pipeline validation and the Chrome trace.
add_test(NAME mpi.error.interleaving_needs_divisible_layers
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "model.n_layer = 4 is not divisible by pp x virtual stages = 2 x 3"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --pp 2 --schedule interleaved --virtual-stages 3)
add_test(NAME mpi.error.interleaving_needs_micro_batches
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "needs micro-batches per step \\(2\\) to be a multiple of pp = 4|at least pp = 4 micro-batches"
                 ${MPIRUN} -q -np 4 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --pp 4 --schedule interleaved --set train.micro_batch=4)
add_test(NAME mpi.error.virtual_stages_need_interleaving
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "--virtual-stages 2 needs --schedule interleaved"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --pp 2 --virtual-stages 2)
add_test(NAME mpi.error.zero2_with_pipeline
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "--zero 2 with --pp 2: sharded gradients are reduce-scattered every micro-batch"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --pp 2 --zero 2)
add_test(NAME mpi.error.hsdp_needs_zero
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "--hsdp 2 shards state within groups, which needs --zero 1, 2 or 3"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --dp 2 --hsdp 2)
set_tests_properties(mpi.error.interleaving_needs_divisible_layers
                     mpi.error.interleaving_needs_micro_batches
                     mpi.error.virtual_stages_need_interleaving
                     mpi.error.zero2_with_pipeline mpi.error.hsdp_needs_zero
                     PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 60)

add_test(NAME mpi.trace
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_trace.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT} ${MICRO_RUN})
set_tests_properties(mpi.trace PROPERTIES PROCESSORS 4 TIMEOUT 120)

# ZeRO and hybrid sharding reproduce the serial run too, and move the theoretical bytes.
mpi_layout_test(dp2_zero1 2 --dp 2 --set parallel.zero=1)
mpi_layout_test(dp2_zero2 2 --dp 2 --set parallel.zero=2)
mpi_layout_test(dp2_zero3 2 --dp 2 --set parallel.zero=3)
mpi_layout_test(dp4_zero3_hsdp2 4 --dp 4 --set parallel.zero=3 --set parallel.hsdp=2)
mpi_layout_test(dp4_zero1_hsdp2 4 --dp 4 --set parallel.zero=1 --set parallel.hsdp=2)
# One shard as wide as the data-parallel group: plain ZeRO-2, its bytes counted on dp.
mpi_layout_test(dp2_zero2_hsdp2 2 --dp 2 --zero 2 --hsdp 2)
mpi_layout_test(tp2_dp2_zero3 4 --tp 2 --dp 2 --set parallel.zero=3)
mpi_layout_test(tp2_dp2_sp_zero2 4 --tp 2 --dp 2 --sequence-parallel --set parallel.zero=2)
mpi_layout_test(pp2_dp2_zero1 4 --pp 2 --dp 2 --set parallel.zero=1)

# Validation with fewer, as many and more evaluation micro-batches than data-parallel ranks
# (train.eval_batches 1, 2 and 3 over dp 2: a rank with no share, equal shares, shares that
# differ) in every layout family: every rank runs the same collectives whatever its share, none
# included, and the validation loss is the serial run's over the same windows. One training
# step, with the validation before and after it; a hang fails within comm.timeout_s.
foreach(e 1 2 3)
  add_test(NAME mpi.serial_eval${e}_reference
           COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                   $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set train.steps=1
                   --set train.eval_batches=${e} --out ${MPI_OUT}/serial_eval${e} --overwrite)
  set_tests_properties(mpi.serial_eval${e}_reference PROPERTIES
                       FIXTURES_SETUP serial_eval${e}_run)
endforeach()
function(mpi_eval_test name ranks eval_batches)
  foreach(e ${eval_batches})
    add_test(NAME mpi.eval${e}_${name}
             COMMAND ${CMAKE_COMMAND} -E env REFERENCE=serial_eval${e}
                     ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                     $<TARGET_FILE:check_run> ${MPI_OUT} eval${e}_${name} ${ranks} ${MICRO_RUN}
                     --set train.steps=1 --set train.eval_batches=${e} --set comm.timeout_s=30
                     ${ARGN})
    set_tests_properties(mpi.eval${e}_${name} PROPERTIES FIXTURES_REQUIRED serial_eval${e}_run
                         PROCESSORS ${ranks} TIMEOUT 150)
  endforeach()
endfunction()
mpi_eval_test(dp2 2 "1;2;3" --dp 2)
mpi_eval_test(pp2_dp2 4 "1;2;3" --pp 2 --dp 2 --schedule 1f1b)
mpi_eval_test(tp2_pp2_dp2 8 "1;3" --tp 2 --pp 2 --dp 2 --schedule 1f1b)
mpi_eval_test(dp2_zero3 2 "1;2;3" --dp 2 --zero 3)
mpi_eval_test(pp2_dp2_interleaved 4 "1;2;3" --pp 2 --dp 2 --schedule interleaved
              --virtual-stages 2)

# Recomputation is bit-identical to keeping activations, also with tensor/sequence and
# pipeline parallelism (tolerance 0 against the same layout without recomputation).
function(mpi_recompute_test name ranks reference)
  add_test(NAME mpi.${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference} RTOL=0
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${name} ${ranks} ${MICRO_RUN} ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES DEPENDS mpi.${reference} PROCESSORS ${ranks}
                                              TIMEOUT 300)
endfunction()
mpi_recompute_test(tp2_sp_recompute_full 2 tp2_sp --tp 2 --sequence-parallel
                   --set train.recompute="full")
mpi_recompute_test(tp2_sp_recompute_selective 2 tp2_sp --tp 2 --sequence-parallel
                   --set train.recompute="selective")
mpi_recompute_test(pp2_1f1b_recompute_full 2 pp2_1f1b --pp 2 --schedule 1f1b
                   --set train.recompute="full")
mpi_recompute_test(dp2_zero3_recompute_full 2 dp2_zero3 --dp 2 --set parallel.zero=3
                   --set train.recompute="full")

# Mixed precision: every ZeRO stage, hybrid sharding, and ZeRO-1 with tensor and pipeline
# parallelism train like the serial run in the same precision, and hold rank 0's parameter,
# gradient and optimizer bytes to the ZeRO formulas exactly (bf16 with 16-bit gradients: 16 Psi
# for plain dp, 4 Psi + 12 Psi / N for ZeRO-1, 2 Psi + 14 Psi / N for ZeRO-2, 16 Psi / N for
# ZeRO-3). Sixteen-bit weights cannot be compared as tightly as fp32 ones: a master weight that
# differs in its last f32 bits between two summation orders can round to a neighbouring bf16
# value (2^-8 relative), and Adam turns that into lr-sized differences for elements whose
# gradients are noise. Losses are held to 1e-4 and weights to 0.1 of their scale (measured
# worst: 1.2e-5 and 2.5e-2 without tensor parallelism); a gradient that is lost or misplaced
# breaks both (docs/parallelism.md). GPT's bf16 tp 2 run is held to 0.2 of the weights' scale:
# its final norm's output differs from the serial run's in the last f32 bits (tp reduces partial
# sums), and with the LM head's logits in bf16 (model/lm_head.hpp) such a difference can round a
# logit to the neighbouring bf16 value, 2^-8 relative, which moves that token's probability by up
# to a few percent; Adam makes lr-sized steps of the resulting noise on elements whose gradients
# are near zero. Measured worst 1.2e-5 (losses) and 0.153 (weights, attn.proj.bias of block 2),
# 0.134 with the three passes on both sides, against 0.082 with f32 logits
# (KINTSUGI_FUSED_LOSS=0); Llama and BLOOM, also tp 2, stay under 0.1 (0.066, 0.031).
set(BF16_RUN --precision bf16 --set train.grad_precision="param")
set(FP16_RUN --precision fp16)
add_test(NAME mpi.serial_bf16_reference
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} ${BF16_RUN} --out ${MPI_OUT}/serial_bf16
                 --overwrite)
add_test(NAME mpi.serial_fp16_reference
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} ${FP16_RUN} --out ${MPI_OUT}/serial_fp16
                 --overwrite)
set_tests_properties(mpi.serial_bf16_reference PROPERTIES FIXTURES_SETUP serial_bf16_run)
set_tests_properties(mpi.serial_fp16_reference PROPERTIES FIXTURES_SETUP serial_fp16_run)
function(mpi_mixed_test name ranks reference)
  if(NOT DEFINED MIXED_WEIGHT_RTOL)
    set(MIXED_WEIGHT_RTOL 0.1)
  endif()
  add_test(NAME mpi.${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference} RTOL=1e-4
                   WEIGHT_RTOL=${MIXED_WEIGHT_RTOL}
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${name} ${ranks} ${MICRO_RUN} ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES FIXTURES_REQUIRED ${reference}_run
                                              PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
mpi_mixed_test(dp2_bf16 2 serial_bf16 --dp 2 ${BF16_RUN})
mpi_mixed_test(dp2_bf16_zero1 2 serial_bf16 --dp 2 --zero 1 ${BF16_RUN})
mpi_mixed_test(dp2_bf16_zero2 2 serial_bf16 --dp 2 --zero 2 ${BF16_RUN})
mpi_mixed_test(dp2_bf16_zero3 2 serial_bf16 --dp 2 --zero 3 ${BF16_RUN})
mpi_mixed_test(dp4_bf16_zero3_hsdp2 4 serial_bf16 --dp 4 --zero 3 --hsdp 2 ${BF16_RUN})
set(MIXED_WEIGHT_RTOL 0.2)  # bf16 logits with tp 2: see above
mpi_mixed_test(tp2_dp2_bf16_zero1 4 serial_bf16 --tp 2 --dp 2 --zero 1 ${BF16_RUN})
unset(MIXED_WEIGHT_RTOL)
mpi_mixed_test(pp2_dp2_fp16_zero1 4 serial_fp16 --pp 2 --dp 2 --zero 1 ${FP16_RUN})
mpi_mixed_test(tp2_sp_dp2_fp16_zero2 4 serial_fp16 --tp 2 --sequence-parallel --dp 2 --zero 2
               ${FP16_RUN})

# Llama and BLOOM (model.family): the tiny shape above in each family, serial and as
# tp 2 x pp 2 x dp 2 with sequence parallelism and ZeRO-1, which must reproduce the serial
# losses and weights (relative 1e-5) and move the theoretical bytes; recomputation is
# bit-identical with tensor and sequence parallelism (RoPE and ALiBi are redone with the rest);
# and bf16 with tensor parallelism and ZeRO-1 tracks the serial bf16 run. Llama runs grouped-query
# attention (4 query heads, 2 kv heads: one kv head per tensor-parallel rank).
set(LLAMA_SHAPE --set model.n_layer=4 --set model.d_model=64 --set model.n_head=4
                --set model.n_kv_head=2 --set model.d_ff=176 --set model.seq_len=32)
set(LLAMA_RUN --config ${PROJECT_SOURCE_DIR}/configs/llama-tiny.toml ${TEST_DATA} ${LLAMA_SHAPE}
              ${TEST_SCHEDULE})
set(BLOOM_RUN
    --config ${PROJECT_SOURCE_DIR}/configs/bloom-tiny.toml ${TEST_DATA}
    --set model.n_layer=4 --set model.d_model=64 --set model.n_head=4 --set model.d_ff=256
    --set model.seq_len=32 ${TEST_SCHEDULE})
# The families of Llama's block with its newer pieces, in Llama's shape above: Qwen2 (biases on
# the query, key and value projections only; tied head), Mistral (a sliding window of 8 of the
# 32 rows; its tiny config's 32 would cover them all) and Llama 3.1's RoPE scaling with a head
# size of its own (4 heads of 48 in a model of 64).
set(QWEN2_RUN --config ${PROJECT_SOURCE_DIR}/configs/qwen2-tiny.toml ${TEST_DATA} ${LLAMA_SHAPE}
              ${TEST_SCHEDULE})
set(MISTRAL_RUN --config ${PROJECT_SOURCE_DIR}/configs/mistral-tiny.toml ${TEST_DATA}
                ${LLAMA_SHAPE} --set model.sliding_window=8 ${TEST_SCHEDULE})
set(LLAMA3_RUN --config ${PROJECT_SOURCE_DIR}/configs/llama3-tiny.toml ${TEST_DATA}
               ${LLAMA_SHAPE} ${TEST_SCHEDULE})
# Qwen3: q_norm and k_norm (replicated weights whose gradients are summed over the
# tensor-parallel ranks), heads of 48 as Llama 3.1's above.
set(QWEN3_RUN --config ${PROJECT_SOURCE_DIR}/configs/qwen3-tiny.toml ${TEST_DATA}
              ${LLAMA_SHAPE} ${TEST_SCHEDULE})
# Bad input refused under mpirun: test mpi.error.NAME expects one line matching PATTERN (from one
# rank) before any work, a non-zero exit and no hang.
function(mpi_refused name ranks pattern)
  add_test(NAME mpi.error.${name}
           COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh "${pattern}"
                   ${MPIRUN} -q -np ${ranks} --oversubscribe $<TARGET_FILE:kintsugi> train
                   --out ${MPI_OUT}/${name}_refused ${ARGN})
  set_tests_properties(mpi.error.${name} PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                    TIMEOUT 60)
endfunction()
# A serial run of the arguments into ${MPI_OUT}/NAME, test mpi.NAME_reference, fixture NAME_run.
function(serial_reference name)
  add_test(NAME mpi.${name}_reference
           COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                   $<TARGET_FILE:kintsugi> train ${ARGN} --out ${MPI_OUT}/${name} --overwrite)
  set_tests_properties(mpi.${name}_reference PROPERTIES FIXTURES_SETUP ${name}_run)
endfunction()
# A layout of `family` against its serial run.
function(family_layout_test family name ranks)
  string(TOUPPER ${family} FAMILY)
  add_test(NAME mpi.${family}_${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${family}_serial
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${family}_${name} ${ranks}
                   ${${FAMILY}_RUN} ${ARGN})
  set_tests_properties(mpi.${family}_${name} PROPERTIES FIXTURES_REQUIRED ${family}_serial_run
                       PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
# Every family: its serial run and tp 2 x pp 2 x dp 2 with sequence parallelism and ZeRO-1.
foreach(family llama bloom qwen2 mistral llama3 qwen3)
  string(TOUPPER ${family} FAMILY)
  serial_reference(${family}_serial ${${FAMILY}_RUN})
  family_layout_test(${family} tp2_pp2_dp2_sp_zero1 8 --tp 2 --pp 2 --dp 2 --sequence-parallel
                     --zero 1)
endforeach()
# Qwen2's qkv biases sharded by ZeRO-3 and gathered under tp.
family_layout_test(qwen2 tp2_dp2_zero3 4 --tp 2 --dp 2 --zero 3)
foreach(family llama bloom)
  string(TOUPPER ${family} FAMILY)
  set(run ${${FAMILY}_RUN})
  serial_reference(${family}_serial_bf16 ${run} ${BF16_RUN})
  family_layout_test(${family} tp2_sp 2 --tp 2 --sequence-parallel)
  set_tests_properties(mpi.${family}_tp2_sp PROPERTIES FIXTURES_SETUP ${family}_tp2_sp_run)
  add_test(NAME mpi.${family}_tp2_sp_recompute_full
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${family}_tp2_sp RTOL=0
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${family}_tp2_sp_recompute_full 2 ${run}
                   --tp 2 --sequence-parallel --set train.recompute="full")
  set_tests_properties(mpi.${family}_tp2_sp_recompute_full PROPERTIES
                       FIXTURES_REQUIRED ${family}_tp2_sp_run PROCESSORS 2 TIMEOUT 300)
  # Losses to 3e-4 here: tp 2 reduces the final norm's partial sums in another order, and a
  # logit that rounds to the neighbouring bf16 value moves the validation loss (measured: Llama
  # 1.4e-5 on a CPU whose bf16 GEMM uses AVX512-BF16 dot products, 1.01e-4 on an AVX2 CPU, AMD
  # EPYC, whose GEMM multiplies in exact f32; BLOOM 7.2e-6).
  add_test(NAME mpi.${family}_tp2_dp2_bf16_zero1
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${family}_serial_bf16 RTOL=3e-4
                   WEIGHT_RTOL=0.1
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${family}_tp2_dp2_bf16_zero1 4 ${run}
                   --tp 2 --dp 2 --zero 1 ${BF16_RUN})
  set_tests_properties(mpi.${family}_tp2_dp2_bf16_zero1 PROPERTIES
                       FIXTURES_REQUIRED ${family}_serial_bf16_run PROCESSORS 4 TIMEOUT 300)
  # fp16 with dynamic loss scaling, pipelined and sharded, against the serial fp16 run.
  serial_reference(${family}_serial_fp16 ${run} ${FP16_RUN})
  add_test(NAME mpi.${family}_pp2_dp2_fp16_zero1
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${family}_serial_fp16 RTOL=1e-4
                   WEIGHT_RTOL=0.1
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${family}_pp2_dp2_fp16_zero1 4 ${run}
                   --pp 2 --dp 2 --zero 1 ${FP16_RUN})
  set_tests_properties(mpi.${family}_pp2_dp2_fp16_zero1 PROPERTIES
                       FIXTURES_REQUIRED ${family}_serial_fp16_run PROCESSORS 4 TIMEOUT 300)
  # The other schedules and ZeRO stages: interleaved 1F1B puts the embedding and the head
  # (Llama's untied, BLOOM's tied copy) on different chunks; ZeRO-3 gathers weights under tp;
  # GPipe with selective recomputation.
  family_layout_test(${family} pp2_interleaved 2 --pp 2 --schedule interleaved
                     --virtual-stages 2)
  family_layout_test(${family} tp2_dp2_zero3 4 --tp 2 --dp 2 --zero 3)
  family_layout_test(${family} pp2_gpipe_recompute_selective 2 --pp 2 --schedule gpipe
                     --recompute selective)
endforeach()
# Mixture of experts (docs/moe.md): configs/moe-tiny.toml in Llama's shape above, 8 experts of
# 44, top 2 (Mixtral), against its serial run: data parallelism with ZeRO-1 and ZeRO-3 (expert
# weights reduced and sharded as any parameter) and a pipeline. And top 1 with a shared expert
# (Qwen2-MoE's gate, router probabilities not renormalized) and full recomputation, data
# parallel against its own serial run. The bytes and memory are held to the theory as every
# layout's.
set(MOE_RUN --config ${PROJECT_SOURCE_DIR}/configs/moe-tiny.toml ${TEST_DATA} ${LLAMA_SHAPE}
            --set model.moe_expert_hidden=44 ${TEST_SCHEDULE})
set(MOESHARED_RUN ${MOE_RUN} --set model.moe_top_k=1 --set model.moe_shared_experts=1
                  --set model.moe_router_norm_topk=false --set train.moe_z_loss_coeff=0.001)
serial_reference(moe_serial ${MOE_RUN})
serial_reference(moeshared_serial ${MOESHARED_RUN})
family_layout_test(moe dp2_zero1 2 --dp 2 --zero 1)
family_layout_test(moe dp2_zero3 2 --dp 2 --zero 3)
family_layout_test(moe pp2_1f1b 2 --pp 2 --schedule 1f1b)
family_layout_test(moeshared dp2_recompute_full 2 --dp 2 --recompute full)
# Mixed precision: the MoE ops stage bf16/f16 tensors through f32 (docs/moe.md, "Precision");
# sharded and pipelined layouts track the serial bf16 (fp16) run as the dense ones do.
serial_reference(moe_serial_bf16 ${MOE_RUN} ${BF16_RUN})
serial_reference(moeshared_serial_fp16 ${MOESHARED_RUN} ${FP16_RUN})
function(moe_mixed_test name reference ranks)
  add_test(NAME mpi.${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference} RTOL=1e-4 WEIGHT_RTOL=0.1
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${name} ${ranks} ${ARGN})
  set_tests_properties(mpi.${name} PROPERTIES FIXTURES_REQUIRED ${reference}_run
                       PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
moe_mixed_test(moe_dp2_zero3_bf16 moe_serial_bf16 2 ${MOE_RUN} ${BF16_RUN} --dp 2 --zero 3)
moe_mixed_test(moe_pp2_1f1b_bf16 moe_serial_bf16 2 ${MOE_RUN} ${BF16_RUN} --pp 2 --schedule 1f1b)
moe_mixed_test(moeshared_dp2_zero1_fp16 moeshared_serial_fp16 2 ${MOESHARED_RUN} ${FP16_RUN}
               --dp 2 --zero 1)
# Llama with a data-parallel rank that has no validation micro-batch of its own, pipelined.
serial_reference(llama_serial_eval1 ${LLAMA_RUN} --set train.steps=1 --set train.eval_batches=1)
add_test(NAME mpi.llama_eval1_pp2_dp2
         COMMAND ${CMAKE_COMMAND} -E env REFERENCE=llama_serial_eval1
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${MPI_OUT} llama_eval1_pp2_dp2 4 ${LLAMA_RUN}
                 --set train.steps=1 --set train.eval_batches=1 --set comm.timeout_s=30
                 --pp 2 --dp 2 --schedule 1f1b)
set_tests_properties(mpi.llama_eval1_pp2_dp2 PROPERTIES FIXTURES_REQUIRED llama_serial_eval1_run
                     PROCESSORS 4 TIMEOUT 150)
# Document attention (docs/data.md): with "." as the end of a document, every 32-token window
# holds several documents. Per family, tensor x pipeline parallelism with sequence
# parallelism reproduces the serial run with documents, and that run's weights differ from
# those of the run without.
set(GPT_RUN ${MICRO_RUN})
foreach(family gpt llama bloom)
  string(TOUPPER ${family} FAMILY)
  set(run ${${FAMILY}_RUN} --set data.document_attention=true --set data.eod_id=13)  # "."
  add_test(NAME mpi.${family}_documents_serial_reference
           COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                   $<TARGET_FILE:kintsugi> train ${run} --out ${MPI_OUT}/${family}_documents_serial
                   --overwrite)
  set_tests_properties(mpi.${family}_documents_serial_reference PROPERTIES
                       FIXTURES_SETUP ${family}_documents_serial_run)
  add_test(NAME mpi.${family}_documents_tp2_pp2_sp
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${family}_documents_serial
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} ${family}_documents_tp2_pp2_sp 4 ${run}
                   --tp 2 --pp 2 --sequence-parallel)
  set_tests_properties(mpi.${family}_documents_tp2_pp2_sp PROPERTIES
                       FIXTURES_REQUIRED ${family}_documents_serial_run PROCESSORS 4 TIMEOUT 300)
  set(plain ${family}_serial)
  if(family STREQUAL "gpt")
    set(plain serial)
  endif()
  add_test(NAME mpi.${family}_documents_change_the_run
           COMMAND $<TARGET_FILE:check_run> compare ${MPI_OUT}/${plain}
                   ${MPI_OUT}/${family}_documents_serial 1e-5 1e-5)
  set_tests_properties(mpi.${family}_documents_change_the_run PROPERTIES
                       PASS_REGULAR_EXPRESSION "tensor blocks.0.attn.qkv.weight: max difference"
                       FIXTURES_REQUIRED "${family}_documents_serial_run;${plain}_run")
endforeach()

# Sliding-window attention (model.sliding_window = 8 of 32 rows): Mistral is Llama with the
# window, and reproduces its serial run in the layout above; that run's weights differ from
# Llama's, which has none.
add_test(NAME mpi.mistral_window_changes_the_run
         COMMAND $<TARGET_FILE:check_run> compare ${MPI_OUT}/llama_serial
                 ${MPI_OUT}/mistral_serial 1e-5 1e-5)
set_tests_properties(mpi.mistral_window_changes_the_run PROPERTIES
                     PASS_REGULAR_EXPRESSION "tensor blocks.0.attn.qkv.weight: max difference"
                     FIXTURES_REQUIRED "mistral_serial_run;llama_serial_run")

add_test(NAME mpi.error.kv_heads_not_divisible_by_tp
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "model.n_kv_head = 2 is not divisible by tp = 4"
                 ${MPIRUN} -q -np 4 --oversubscribe $<TARGET_FILE:kintsugi> train ${LLAMA_RUN}
                 --tp 4)
set_tests_properties(mpi.error.kv_heads_not_divisible_by_tp PROPERTIES
                     PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 60)

# `kintsugi tune`: the planner's best 3 layouts of the micro GPT on 4 local ranks, 3 steps each,
# measured and refit (docs/planner.md); plan -> tune -> plan closes: the plan on the refit
# cluster ranks first the layout measured fastest, or says they tie (mpi.plan_after_tune runs
# that plan).
add_test(NAME mpi.tune
         COMMAND ${MPI_ENV} OMP_NUM_THREADS=1 $<TARGET_FILE:kintsugi> tune ${MICRO_RUN} --ranks 4 --top 3 --steps 3
                 --out ${MPI_OUT}/tune)
set_tests_properties(mpi.tune PROPERTIES FIXTURES_REQUIRED local_links FIXTURES_SETUP tuned
                     PROCESSORS 4 TIMEOUT 300
                     PASS_REGULAR_EXPRESSION "refit: compute x [0-9.]+.*best measured: tp [0-9]+ (grid [0-9]+x[0-9]+x[0-9]+ )?pp [0-9]+ dp [0-9]+.*refit plan: #1 [^:]+: (the measured fastest|ties with the measured fastest)")
add_test(NAME mpi.plan_after_tune
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_after_tune.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT}/tune ${MICRO_RUN})
set_tests_properties(mpi.plan_after_tune PROPERTIES FIXTURES_REQUIRED tuned TIMEOUT 60)

# `tune --device cpu`: the runs train on the CPU (the device tune reports) with the CPU's local
# cluster, as without the flag; one layout, 2 steps, to keep it short.
add_test(NAME mpi.tune_device_cpu
         COMMAND ${MPI_ENV} OMP_NUM_THREADS=1 $<TARGET_FILE:kintsugi> tune ${MICRO_RUN}
                 --device cpu --ranks 2 --top 1 --steps 2 --json --out ${MPI_OUT}/tune-device-cpu)
set_tests_properties(mpi.tune_device_cpu PROPERTIES FIXTURES_REQUIRED local_links PROCESSORS 2
                     TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"device\": \"cpu\"")

# The planner's memory for the first pipeline stage is what these runs' rank 0 recorded.
add_test(NAME mpi.plan_matches_runs
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_matches_runs.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT} ${MICRO_RUN} --
                 "dp2_tp2:4:--tp 2 --tensor-grid none --dp 2 --zero 0 --sequence-parallel=false --micro-batch 1 --recompute none"
                 "tp2_dp2_zero3:4:--tp 2 --tensor-grid none --dp 2 --zero 3 --sequence-parallel=false --micro-batch 1 --recompute none"
                 "tp2_dp2_sp_zero2:4:--tp 2 --tensor-grid none --dp 2 --zero 2 --sequence-parallel --micro-batch 1 --recompute none"
                 "pp2_1f1b:2:--pp 2 --schedule 1f1b --micro-batch 1 --recompute none"
                 "pp2_gpipe:2:--pp 2 --schedule gpipe --micro-batch 1 --recompute none"
                 "pp2_interleaved:2:--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 1 --recompute none"
                 "pp2_dp2_zero1:4:--pp 2 --dp 2 --zero 1 --schedule 1f1b --micro-batch 1 --recompute none"
                 "tp2_pp2_dp2_sp:8:--tp 2 --tensor-grid none --pp 2 --dp 2 --zero 0 --schedule 1f1b --sequence-parallel --micro-batch 1 --recompute none"
                 "dp4_zero3_hsdp2:4:--dp 4 --zero 3 --hsdp 2 --micro-batch 1 --recompute none"
                 "dp4_zero1_hsdp2:4:--dp 4 --zero 1 --hsdp 2 --micro-batch 1 --recompute none"
                 "grid_2x2x1:4:--tensor-grid 2,2,1 --micro-batch 1 --recompute none"
                 "grid_1x2x2:4:--tensor-grid 1,2,2 --micro-batch 2 --recompute none"
                 "grid_2x1x1_pp2:4:--tensor-grid 2,1,1 --pp 2 --schedule 1f1b --micro-batch 1 --recompute none"
                 "grid_1x1x2_dp2_zero3:4:--tensor-grid 1,1,2 --dp 2 --zero 3 --micro-batch 2 --recompute none")
set_tests_properties(mpi.plan_matches_runs PROPERTIES FIXTURES_REQUIRED local_links
                     DEPENDS "mpi.dp2_tp2;mpi.tp2_dp2_zero3;mpi.tp2_dp2_sp_zero2;mpi.pp2_1f1b;mpi.pp2_gpipe;mpi.pp2_interleaved;mpi.pp2_dp2_zero1;mpi.tp2_pp2_dp2_sp;mpi.dp4_zero3_hsdp2;mpi.dp4_zero1_hsdp2;mpi.grid_2x2x1;mpi.grid_1x2x2;mpi.grid_2x1x1_pp2;mpi.grid_1x1x2_dp2_zero3")
# The planner against a family's runs: each argument NAME:RANKS:"PLAN ARGS" names a run of
# ${MPI_OUT} (test mpi.NAME, or mpi.NAME_reference for the serial one) in ${FAMILY}_RUN's model.
function(plan_matches_family_runs family)
  string(TOUPPER ${family} FAMILY)
  set(depends)
  foreach(spec IN LISTS ARGN)
    string(REGEX REPLACE ":.*" "" run "${spec}")
    if(run STREQUAL "${family}_serial")
      set(run ${run}_reference)
    endif()
    list(APPEND depends mpi.${run})
  endforeach()
  add_test(NAME mpi.plan_matches_runs_${family}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_matches_runs.sh $<TARGET_FILE:kintsugi>
                   ${MPI_OUT} ${${FAMILY}_RUN} -- ${ARGN})
  set_tests_properties(mpi.plan_matches_runs_${family} PROPERTIES FIXTURES_REQUIRED local_links
                       DEPENDS "${depends}")
endfunction()
set(PLAN_SERIAL "--micro-batch 1 --recompute none")
set(PLAN_TP2_PP2_DP2_SP_ZERO1 "--tp 2 --tensor-grid none --pp 2 --dp 2 --zero 1 --schedule 1f1b --sequence-parallel --micro-batch 1 --recompute none")
foreach(family llama bloom)
  plan_matches_family_runs(${family}
      "${family}_serial:1:${PLAN_SERIAL}"
      "${family}_pp2_interleaved:2:--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 1 --recompute none"
      "${family}_tp2_dp2_zero3:4:--tp 2 --tensor-grid none --dp 2 --zero 3 --sequence-parallel=false --micro-batch 1 --recompute none"
      "${family}_tp2_pp2_dp2_sp_zero1:8:${PLAN_TP2_PP2_DP2_SP_ZERO1}")
endforeach()

# Ranks launched with different configurations (an MPMD launch here) are refused before any
# group is built: one line naming the first differing key and the ranks.
add_test(NAME mpi.ranks_with_different_configs_refused
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "different configurations: train.lr = 0.001 \\(rank 0\\) vs 0.002 \\(rank 1\\); ranks 1 differ"
                 ${MPIRUN} -q --oversubscribe
                 -np 1 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --dp 2 --set train.lr=1e-3
                 --out ${MPI_OUT}/different_configs :
                 -np 1 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --dp 2 --set train.lr=2e-3
                 --out ${MPI_OUT}/different_configs)
set_tests_properties(mpi.ranks_with_different_configs_refused PROPERTIES
                     PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 60)

# Ranks sharing a node's cores: 2 ranks of as many threads as the machine has cores ask for
# twice its cores, so the MFU peak counts half of each rank's measured rate.
cmake_host_system_information(RESULT KINTSUGI_TEST_CORES QUERY NUMBER_OF_LOGICAL_CORES)
add_test(NAME mpi.mfu_peak_counts_shared_cores
         COMMAND ${MPI_ENV} ${MPIRUN} -q -np 2 --oversubscribe --bind-to none
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --dp 2 --set train.steps=2
                 --set train.threads=${KINTSUGI_TEST_CORES} --out ${MPI_OUT}/mfu_shared --overwrite)
set_tests_properties(mpi.mfu_peak_counts_shared_cores PROPERTIES PROCESSORS 2 TIMEOUT 120
                     PASS_REGULAR_EXPRESSION "x 2 ranks x 0\\.50 \\(2 ranks x ${KINTSUGI_TEST_CORES} thread")

# Qwen3 (model.family = qwen3) at tp 2, with and without sequence parallelism, against its
# serial run: q_norm and k_norm's weights are replicated and their gradients summed over the
# tensor-parallel ranks with or without sequence parallelism, an all-reduce the theory counts
# (run_layout.sh holds the communicator's bytes to it; the planner's below).
foreach(sp tp2 tp2_sp)
  set(flags --tp 2)
  if(sp STREQUAL "tp2_sp")
    list(APPEND flags --sequence-parallel)
  endif()
  add_test(NAME mpi.qwen3_${sp}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=qwen3_serial
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} qwen3_${sp} 2 ${QWEN3_RUN} ${flags})
  set_tests_properties(mpi.qwen3_${sp} PROPERTIES FIXTURES_REQUIRED qwen3_serial_run
                       PROCESSORS 2 TIMEOUT 300)
endforeach()
plan_matches_family_runs(qwen3
    "qwen3_serial:1:${PLAN_SERIAL}"
    "qwen3_tp2:2:--tp 2 --tensor-grid none --sequence-parallel=false --micro-batch 1 --recompute none"
    "qwen3_tp2_sp:2:--tp 2 --tensor-grid none --sequence-parallel --micro-batch 1 --recompute none"
    "qwen3_tp2_pp2_dp2_sp_zero1:8:${PLAN_TP2_PP2_DP2_SP_ZERO1}")
