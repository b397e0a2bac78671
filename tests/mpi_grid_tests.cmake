# 3D tensor parallelism (--tensor-grid X,Y,Z; docs/parallelism.md): representative grids train
# the tiny 4-layer GPT of mpi_tests.cmake and must match the serial run's losses and weights
# (relative 1e-5), move exactly the bytes of plan/comm_volume.hpp and hold the memory of
# plan/memory.hpp. A grid with z > 1 splits each micro-batch's sequences over z, so those runs
# use 2 sequences per micro-batch and a serial reference with the same micro-batch (validation
# reads eval_batches x micro_batch windows). The other grids and layouts are in
# bench/tensor_grid_layouts.sh.
add_test(NAME mpi.serial_reference_mb2
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set train.micro_batch=2
                 --out ${MPI_OUT}/serial_mb2 --overwrite)
set_tests_properties(mpi.serial_reference_mb2 PROPERTIES FIXTURES_SETUP serial_mb2_run)

function(mpi_grid_test name ranks reference)
  add_test(NAME mpi.grid_${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference}
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} grid_${name} ${ranks} ${MICRO_RUN} ${ARGN})
  set_tests_properties(mpi.grid_${name} PROPERTIES FIXTURES_REQUIRED ${reference}_run
                                                   PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
# 1 x 2 x 1 is Megatron's 1D layout over y; 2 x 1 x 1 its transpose (heads whole, attention
# replicated over x); 1 x 1 x 2 shards every weight over z and splits the sequences.
mpi_grid_test(1x2x1 2 serial --tensor-grid 1,2,1)
mpi_grid_test(2x1x1 2 serial --tensor-grid 2,1,1)
mpi_grid_test(1x1x2 2 serial_mb2 --tensor-grid 1,1,2 --set train.micro_batch=2)
mpi_grid_test(2x2x1 4 serial --tensor-grid 2,2,1)
mpi_grid_test(1x2x2 4 serial_mb2 --tensor-grid 1,2,2 --set train.micro_batch=2)
mpi_grid_test(2x1x2 4 serial_mb2 --tensor-grid 2,1,2 --set train.micro_batch=2)
mpi_grid_test(2x1x1_dp2 4 serial --tensor-grid 2,1,1 --dp 2)
mpi_grid_test(1x1x2_dp2 4 serial_mb2 --tensor-grid 1,1,2 --dp 2 --set train.micro_batch=2)
# The fourth dimension's sharding, and pipeline stages of grids.
mpi_grid_test(2x1x1_dp2_zero1 4 serial --tensor-grid 2,1,1 --dp 2 --zero 1)
mpi_grid_test(1x1x2_dp2_zero3 4 serial_mb2 --tensor-grid 1,1,2 --dp 2 --zero 3
              --set train.micro_batch=2)
mpi_grid_test(2x1x1_pp2 4 serial --tensor-grid 2,1,1 --pp 2)

# Mixed precision against the serial run in the same precision, at the bars of the 1D layouts
# (mpi_tests.cmake): losses to 1e-4, weights to 0.2 of their scale for GPT in bf16 (its logits
# are bf16), 0.1 in fp16.
add_test(NAME mpi.serial_fp16_reference_mb2
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} ${FP16_RUN} --set train.micro_batch=2
                 --out ${MPI_OUT}/serial_fp16_mb2 --overwrite)
set_tests_properties(mpi.serial_fp16_reference_mb2 PROPERTIES FIXTURES_SETUP serial_fp16_mb2_run)
foreach(case "2x2x1_bf16;serial_bf16;0.2;--tensor-grid;2,2,1;${BF16_RUN}"
             "1x2x2_fp16;serial_fp16_mb2;0.1;--tensor-grid;1,2,2;--set;train.micro_batch=2;${FP16_RUN}")
  list(POP_FRONT case name reference weight_rtol)
  add_test(NAME mpi.grid_${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference} RTOL=1e-4
                   WEIGHT_RTOL=${weight_rtol}
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} grid_${name} 4 ${MICRO_RUN} ${case})
  set_tests_properties(mpi.grid_${name} PROPERTIES FIXTURES_REQUIRED ${reference}_run
                       PROCESSORS 4 TIMEOUT 300)
endforeach()

# Llama (grouped-query attention with one kv head per y rank, RoPE, SwiGLU) and BLOOM (ALiBi
# slopes of each y rank's own heads, embedding norm), with recomputation: full recomputation is
# bit-identical to the same grid without it.
function(grid_family_test family name ranks reference)
  string(TOUPPER ${family} FAMILY)
  add_test(NAME mpi.grid_${family}_${name}
           COMMAND ${CMAKE_COMMAND} -E env REFERENCE=${reference} RTOL=${GRID_RTOL}
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} grid_${family}_${name} ${ranks}
                   ${${FAMILY}_RUN} ${ARGN})
  set_tests_properties(mpi.grid_${family}_${name} PROPERTIES FIXTURES_REQUIRED ${reference}_run
                       PROCESSORS ${ranks} TIMEOUT 300)
endfunction()
foreach(family llama bloom qwen2)
  string(TOUPPER ${family} FAMILY)
  add_test(NAME mpi.${family}_serial_reference_mb2
           COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                   $<TARGET_FILE:kintsugi> train ${${FAMILY}_RUN} --set train.micro_batch=2
                   --out ${MPI_OUT}/${family}_serial_mb2 --overwrite)
  set_tests_properties(mpi.${family}_serial_reference_mb2 PROPERTIES
                       FIXTURES_SETUP ${family}_serial_mb2_run)
endforeach()
set(GRID_RTOL 1e-5)
grid_family_test(llama 2x2x1 4 llama_serial --tensor-grid 2,2,1)
grid_family_test(llama 2x1x2 4 llama_serial_mb2 --tensor-grid 2,1,2 --set train.micro_batch=2)
set_tests_properties(mpi.grid_llama_2x1x2 PROPERTIES FIXTURES_SETUP grid_llama_2x1x2_run)
grid_family_test(bloom 1x2x2 4 bloom_serial_mb2 --tensor-grid 1,2,2 --set train.micro_batch=2)
grid_family_test(bloom 2x2x1_recompute_selective 4 bloom_serial --tensor-grid 2,2,1
                 --recompute selective)
# Qwen2: a bias on the entry layer qkv only (replicated over the inner x, its gradient from
# each z rank's rows summed over z), none on the exit layers.
grid_family_test(qwen2 2x1x2 4 qwen2_serial_mb2 --tensor-grid 2,1,2 --set train.micro_batch=2)
set(GRID_RTOL 0)
grid_family_test(llama 2x1x2_recompute_full 4 grid_llama_2x1x2 --tensor-grid 2,1,2
                 --set train.micro_batch=2 --recompute full)

# What 3D tensor parallelism refuses, each with one line before any work.
function(grid_refused name ranks pattern)
  add_test(NAME mpi.error.grid_${name}
           COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh "${pattern}"
                   ${MPIRUN} -q -np ${ranks} --oversubscribe $<TARGET_FILE:kintsugi> train
                   ${MICRO_RUN} --out ${MPI_OUT}/grid_refused ${ARGN})
  set_tests_properties(mpi.error.grid_${name} PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                         TIMEOUT 60)
endfunction()
grid_refused(micro_batch 2 "train.micro_batch = 1 must be a multiple of 2"
             --tensor-grid 1,1,2)
grid_refused(heads 3 "model.n_head = 4 .* must be divisible by the grid's y = 3"
             --tensor-grid 1,3,1)

# The same on one process (a 1 x 1 x 1 grid is a single rank: the serial layout).
set(GRID_EXPECT_ERROR ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh)
function(grid_refused_serial name pattern)
  add_test(NAME cli.error.grid_${name}
           COMMAND ${GRID_EXPECT_ERROR} "${pattern}" $<TARGET_FILE:kintsugi> ${ARGN})
endfunction()
set(GRID_TINY train --config ${PROJECT_SOURCE_DIR}/configs/gpt-tiny.toml
              --out ${MPI_OUT}/grid_refused_serial)
grid_refused_serial(malformed "parallel.tensor_grid must be three whole numbers of at least 1, \\[x, y, z\\], not 2 entries"
                    ${GRID_TINY} --tensor-grid 2,2)
grid_refused_serial(tp_disagrees "--tensor-grid 1,1,1 has 1 rank but --tp is 2"
                    ${GRID_TINY} --tensor-grid 1,1,1 --tp 2)
grid_refused_serial(sequence_parallel "with --sequence-parallel: 3D tensor parallelism"
                    ${GRID_TINY} --tensor-grid 1,1,1 --sequence-parallel)

# Training checkpoints of a grid (pieces split in both dimensions of a weight: "cols_begin"):
# resumed in the same grid bit for bit, resharded to the serial layout, from the serial layout,
# and to another grid (losses and weights within 1e-5 of the run that never moved); exported to
# Hugging Face safetensors with the same bytes as the run's gathered model.
set(GRID_CKPT ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint)
function(grid_resume_test name rtol writer reader processors)
  add_test(NAME ckpt.grid_${name}
           COMMAND ${CMAKE_COMMAND} -E env RTOL=${rtol}
                   ${GRID_CKPT}/resume.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${MPI_OUT}/grid_checkpoints ${name} ${writer} ${reader} ${MICRO_RUN} ${ARGN})
  set_tests_properties(ckpt.grid_${name} PROPERTIES PROCESSORS ${processors} TIMEOUT 300)
endfunction()
grid_resume_test(exact_2x1x2 0 "4 --tensor-grid 2,1,2" "4 --tensor-grid 2,1,2" 4
                 --set train.micro_batch=2)
set_tests_properties(ckpt.grid_exact_2x1x2 PROPERTIES FIXTURES_SETUP grid_checkpoint)
grid_resume_test(reshard_2x1x2_to_serial 1e-5 "4 --tensor-grid 2,1,2" "1" 4
                 --set train.micro_batch=2)
grid_resume_test(reshard_serial_to_2x2x1 1e-5 "1" "4 --tensor-grid 2,2,1" 4)
grid_resume_test(reshard_2x2x1_to_1x2x2 1e-5 "4 --tensor-grid 2,2,1" "4 --tensor-grid 1,2,2" 4
                 --set train.micro_batch=2)
add_test(NAME ckpt.grid_export_from_checkpoint
         COMMAND ${GRID_CKPT}/export_sharded.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT}/grid_checkpoints/exact_2x1x2/full ${MPI_OUT}/grid_checkpoints)
set_tests_properties(ckpt.grid_export_from_checkpoint PROPERTIES FIXTURES_REQUIRED grid_checkpoint
                                                                 TIMEOUT 60)

# Document attention on a grid (each z rank derives its own sequences' document starts), and
# `kintsugi eval --tensor-grid` of the serial run's saved model.
add_test(NAME mpi.serial_reference_documents_mb2
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set train.micro_batch=2
                 --set data.document_attention=true --set data.eod_id=13
                 --out ${MPI_OUT}/serial_documents_mb2 --overwrite)
set_tests_properties(mpi.serial_reference_documents_mb2 PROPERTIES
                     FIXTURES_SETUP serial_documents_mb2_run)
mpi_grid_test(2x1x2_documents 4 serial_documents_mb2 --tensor-grid 2,1,2
              --set train.micro_batch=2 --set data.document_attention=true --set data.eod_id=13)
add_test(NAME mpi.grid_eval_2x1x2
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/grid_eval.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT}/serial_mb2/model ${TEST_VAL} 2,1,2 4)
set_tests_properties(mpi.grid_eval_2x1x2 PROPERTIES FIXTURES_REQUIRED serial_mb2_run
                                                    PROCESSORS 4 TIMEOUT 120)

# Validation with fewer evaluation micro-batches than data-parallel ranks under a grid
# (train.eval_batches 1 over dp 2: a rank with no share; 3: shares that differ), as the 1D
# layouts do in mpi_tests.cmake: every rank runs the same grid collectives whatever its share,
# and the validation loss is the serial run's over the same windows; a hang fails within
# comm.timeout_s.
mpi_eval_test(grid_2x1x1_dp2 4 "1;3" --tensor-grid 2,1,1 --dp 2)
mpi_eval_test(grid_1x2x1_dp2 4 "1" --tensor-grid 1,2,1 --dp 2)

# Overlap of the grid's collectives with computation (parallel.tensor_grid_overlap) is
# bit-identical to the blocking path and visible in the Chrome trace (tests/mpi/grid_overlap.sh).
foreach(case "2x2x1;--tensor-grid;2,2,1" "1x2x2;--tensor-grid;1,2,2;--set;train.micro_batch=2")
  list(POP_FRONT case name)
  add_test(NAME mpi.grid_overlap_${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/grid_overlap.sh $<TARGET_FILE:kintsugi>
                   $<TARGET_FILE:check_run> ${MPI_OUT} grid_overlap_${name} 4 ${MICRO_RUN}
                   ${case})
  set_tests_properties(mpi.grid_overlap_${name} PROPERTIES PROCESSORS 4 TIMEOUT 300)
endforeach()
