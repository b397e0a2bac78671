# Training checkpoints (docs/checkpoints.md): exact resume in the same layout (bit for bit, fp32
# and mixed precision with the loss scaler), resharding to other layouts (losses and weights
# within 1e-5 of the run that never moved), refusal of damaged or mismatched checkpoints, a job
# killed in the middle of a save, pre-emption by SIGTERM/SIGINT, and Hugging Face export and
# import. All on the tiny model of MICRO_RUN (mpi_tests.cmake).
set(CKPT ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint)
set(CKPT_OUT ${MPI_OUT}/checkpoints)

# WRITER and READER: "RANKS [layout flags]"; the rest are flags both runs share.
function(checkpoint_resume_test name rtol writer reader processors)
  add_test(NAME ckpt.${name}
           COMMAND ${CMAKE_COMMAND} -E env RTOL=${rtol}
                   ${CKPT}/resume.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run> ${CKPT_OUT}
                   ${name} ${writer} ${reader} ${MICRO_RUN} ${ARGN})
  set_tests_properties(ckpt.${name} PROPERTIES PROCESSORS ${processors} TIMEOUT 300)
endfunction()
checkpoint_resume_test(exact_serial 0 "1" "1" 1)
checkpoint_resume_test(exact_pp2_dp2_zero1 0 "4 --pp 2 --dp 2 --zero 1" "4 --pp 2 --dp 2 --zero 1" 4)
checkpoint_resume_test(exact_tp2_dp2_zero3 0 "4 --tp 2 --dp 2 --zero 3" "4 --tp 2 --dp 2 --zero 3" 4)
# fp16: a first loss scale of 1e7 overflows at step 1 (skipped: the optimizer is a step behind
# the training step) and is halved; with a window of 2 it doubles again at step 4, after the
# checkpoint of step 2, which must carry the scale and its clean-step count.
checkpoint_resume_test(exact_fp16_loss_scaler 0 "1" "1" 1 --precision fp16
                       --set train.loss_scale=1e7 --set train.loss_scale_window=2)
checkpoint_resume_test(exact_bf16_dp2_zero2 0 "2 --dp 2 --zero 2" "2 --dp 2 --zero 2" 2
                       --precision bf16)
# A mixture of experts (docs/moe.md; the micro model as Llama with 4 experts of 32 and a shared
# expert): expert weights and their optimizer state resume bit for bit under ZeRO-1, and load
# from ZeRO-3 into a pipeline.
set(MOE_CKPT --set model.family=llama --set model.moe_experts=4 --set model.moe_expert_hidden=32
             --set model.moe_shared_experts=1)
checkpoint_resume_test(exact_moe_dp2_zero1 0 "2 --dp 2 --zero 1" "2 --dp 2 --zero 1" 2 ${MOE_CKPT})
checkpoint_resume_test(reshard_moe_dp2_zero3_to_pp2 1e-5 "2 --dp 2 --zero 3" "2 --pp 2" 2
                       ${MOE_CKPT})
# Expert parallelism (docs/moe.md): each rank's experts are pieces of the checkpoint like any
# parameter; resume bit for bit at the same ep (ZeRO-1 over the experts' 1 and 2 edp ranks),
# and reshard between ep sizes.
checkpoint_resume_test(exact_moe_ep2_zero1 0 "2 --dp 2 --ep 2 --zero 1" "2 --dp 2 --ep 2 --zero 1"
                       2 ${MOE_CKPT})
checkpoint_resume_test(exact_moe_dp4_ep2 0 "4 --dp 4 --ep 2" "4 --dp 4 --ep 2" 4 ${MOE_CKPT})
# DeepSeek-style routing (docs/moe.md): 8 experts in 4 groups (2 kept), sigmoid scores; the
# auxiliary-loss-free bias (moved by 1e-2 a step: 0.02 at the checkpoint, which changes the
# routing of the steps after it) resumes exactly from the checkpoint's manifest.
checkpoint_resume_test(exact_moe_deepseek_ep2 0 "2 --dp 2 --ep 2" "2 --dp 2 --ep 2" 2 ${MOE_CKPT}
                       --set model.moe_experts=8 --set model.moe_router_score=sigmoid
                       --set model.moe_router_groups=4 --set model.moe_router_topk_groups=2
                       --set model.moe_routed_scaling_factor=2.5
                       --set model.moe_router_bias_update_rate=1e-2)
checkpoint_resume_test(reshard_moe_ep2_to_dp2 1e-5 "2 --dp 2 --ep 2" "2 --dp 2" 2 ${MOE_CKPT})
checkpoint_resume_test(reshard_moe_dp4_ep2_zero3_to_ep4 1e-5 "4 --dp 4 --ep 2 --zero 3"
                       "4 --dp 4 --ep 4" 4 ${MOE_CKPT})
# Dense blocks (docs/moe.md, "Dense blocks": dense, MoE, dense, MoE, block 0 dense by
# model.moe_first_dense_layers and block 2 by model.moe_dense_layers): resume bit for bit under ep 2 with ZeRO-1 (the
# expert store holds the MoE blocks' experts alone), and reshard from ep 2 with ZeRO-3 to a
# pipeline whose stages split dense, MoE | dense, MoE.
set(MOEDENSE_CKPT ${MOE_CKPT} --set model.moe_first_dense_layers=1 --set model.moe_layer_freq=1
                  --set "model.moe_dense_layers=[2]")
checkpoint_resume_test(exact_moedense_ep2_zero1 0 "2 --dp 2 --ep 2 --zero 1"
                       "2 --dp 2 --ep 2 --zero 1" 2 ${MOEDENSE_CKPT})
checkpoint_resume_test(reshard_moedense_ep2_zero3_to_pp2 1e-5 "2 --dp 2 --ep 2 --zero 3" "2 --pp 2"
                       2 ${MOEDENSE_CKPT})
checkpoint_resume_test(reshard_tp2_pp2_dp2_to_serial 1e-5 "8 --tp 2 --pp 2 --dp 2" "1" 8)
checkpoint_resume_test(reshard_serial_to_tp4 1e-5 "1" "4 --tp 4" 4)
checkpoint_resume_test(reshard_pp2_zero1_to_dp4_zero3 1e-5 "4 --pp 2 --dp 2 --zero 1"
                       "4 --dp 4 --zero 3" 4)
checkpoint_resume_test(reshard_dp4_zero3_hsdp2_to_tp2_dp2_zero2 1e-5
                       "4 --dp 4 --zero 3 --hsdp 2" "4 --tp 2 --dp 2 --zero 2" 4)
# Context parallelism holds no weights of its own: resumed in its layout bit for bit, and into
# another cp with ZeRO sharded over dp x cp.
checkpoint_resume_test(exact_cp2_dp2_zero3 0 "4 --cp 2 --dp 2 --zero 3" "4 --cp 2 --dp 2 --zero 3" 4)
checkpoint_resume_test(reshard_cp2_dp2_zero1_to_cp4 1e-5 "4 --cp 2 --dp 2 --zero 1" "4 --cp 4" 4)
checkpoint_resume_test(reshard_interleaved_to_tp2_sp 1e-5
                       "4 --pp 2 --dp 2 --schedule interleaved --virtual-stages 2"
                       "2 --tp 2 --sequence-parallel" 4)
set_tests_properties(ckpt.exact_serial PROPERTIES FIXTURES_SETUP serial_checkpoint)
set_tests_properties(ckpt.reshard_tp2_pp2_dp2_to_serial PROPERTIES FIXTURES_SETUP sharded_checkpoint)

# Damaged or mismatched checkpoints: one line, non-zero exit, nothing loaded.
set(GOOD_CKPT ${CKPT_OUT}/exact_serial/full/checkpoints/step-00000002)
function(checkpoint_refused_test kind pattern)
  add_test(NAME ckpt.refused.${kind}
           COMMAND ${CKPT}/expect_refused.sh ${kind} ${pattern} $<TARGET_FILE:kintsugi>
                   ${GOOD_CKPT} ${CKPT_OUT} ${MICRO_RUN} ${ARGN})
  set_tests_properties(ckpt.refused.${kind} PROPERTIES FIXTURES_REQUIRED serial_checkpoint
                                                      TIMEOUT 60)
endfunction()
checkpoint_refused_test(corrupt "rank-00000.bin is corrupt: its checksum")
checkpoint_refused_test(truncated "rank-00000.bin is truncated or corrupt")
checkpoint_refused_test(no-shard "shard file rank-00000.bin is missing")
checkpoint_refused_test(no-piece "is incomplete: .* elements of .* are in no shard")
checkpoint_refused_test(no-manifest "not a complete checkpoint: manifest.json is missing")
# A manifest with a field out of range, or edited within range (its own checksum catches it).
function(manifest_refused_test name edit pattern)
  add_test(NAME ckpt.refused.manifest_${name}
           COMMAND ${CMAKE_COMMAND} -E env EDIT=${edit}
                   ${CKPT}/expect_refused.sh manifest ${pattern} $<TARGET_FILE:kintsugi>
                   ${GOOD_CKPT} ${CKPT_OUT} ${MICRO_RUN})
  set_tests_properties(ckpt.refused.manifest_${name} PROPERTIES FIXTURES_REQUIRED serial_checkpoint
                                                               TIMEOUT 60)
endfunction()
manifest_refused_test(negative_step "step=-5" "step = -5 is not an integer from 0")
manifest_refused_test(fractional_step "step=4.5" "step = 4.5 is not an integer from 0")
manifest_refused_test(negative_optimizer_steps "optimizer_steps=-3"
                      "optimizer_steps = -3 is not an integer from 0 to 2")
manifest_refused_test(negative_loss_scale "loss_scaler.scale=-1"
                      "loss_scaler.scale = -1 is not a positive number")
manifest_refused_test(edited "loss_scaler.clean_steps=1"
                      "manifest.json is corrupt or was edited: its checksum")
# Under mpirun the ranks agree on the verdict: one line, no hang (rank 0 checksums file 0).
add_test(NAME ckpt.refused.corrupt_under_mpirun
         COMMAND ${CMAKE_COMMAND} -E env RANKS=2
                 ${CKPT}/expect_refused.sh corrupt "rank-00000.bin is corrupt: its checksum"
                 $<TARGET_FILE:kintsugi> ${GOOD_CKPT} ${CKPT_OUT} ${MICRO_RUN} --dp 2)
set_tests_properties(ckpt.refused.corrupt_under_mpirun PROPERTIES
                     FIXTURES_REQUIRED serial_checkpoint PROCESSORS ${MPI_WAITING_PROCESSORS}
                     TIMEOUT 60)
checkpoint_refused_test(other-model
                        "saved from a different model \\(n_layer 4 \\(checkpoint\\) vs 2\\)"
                        --set model.n_layer=2)
checkpoint_refused_test(past-the-end "is at step 2, past train.steps = 1: raise train.steps"
                        --set train.steps=1)

# A rank dies while the checkpoint of step 4 is being written.
function(checkpoint_kill_test name ranks)
  add_test(NAME ckpt.${name}
           COMMAND ${CKPT}/kill_mid_save.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${name} ${ranks} ${MICRO_RUN} ${ARGN})
  set_tests_properties(ckpt.${name} PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 300)
endfunction()
checkpoint_kill_test(killed_mid_save_serial 1)
checkpoint_kill_test(killed_mid_save_dp2_zero1 2 --dp 2 --zero 1)

# Pre-emption: one process, and a 2-rank job in which only the last rank is signalled.
foreach(signal TERM INT)
  add_test(NAME ckpt.stop_on_sig${signal}
           COMMAND ${CKPT}/sigterm.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run> ${CKPT_OUT}
                   ${signal} 1 ${MICRO_RUN})
  set_tests_properties(ckpt.stop_on_sig${signal} PROPERTIES TIMEOUT 300)
endforeach()
add_test(NAME ckpt.stop_on_sigTERM_one_rank_of_dp2
         COMMAND ${CKPT}/sigterm.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run> ${CKPT_OUT}
                 TERM 2 ${MICRO_RUN} --dp 2)
set_tests_properties(ckpt.stop_on_sigTERM_one_rank_of_dp2 PROPERTIES PROCESSORS 2 TIMEOUT 300)
# The signalled rank's stage agrees with its data-parallel peer and drains; the other stage
# learns of it when the step's program ends.
add_test(NAME ckpt.stop_on_sigTERM_one_rank_of_pp2_dp2
         COMMAND ${CKPT}/sigterm.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run> ${CKPT_OUT}
                 TERM 4 ${MICRO_RUN} --pp 2 --dp 2)
set_tests_properties(ckpt.stop_on_sigTERM_one_rank_of_pp2_dp2 PROPERTIES PROCESSORS 2 TIMEOUT 300)

# Hugging Face safetensors export, checked by an independent reader, and --init-from.
add_test(NAME ckpt.export_import
         COMMAND ${CKPT}/export_import.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                 ${CKPT_OUT} export_import ${MICRO_RUN})
# Llama (q_proj, k_proj, v_proj split out of the fused qkv, grouped-query attention, untied
# head), BLOOM (fused query_key_value per head, embedding LayerNorm), Qwen2 (q/k/v biases split
# likewise, tied head), Mistral (its sliding_window), Llama 3.1's RoPE scaling and head_dim and
# Qwen3 (q_norm and k_norm).
foreach(family llama bloom qwen2 mistral llama3 qwen3)
  string(TOUPPER ${family} upper)
  add_test(NAME ckpt.export_import_${family}
           COMMAND ${CKPT}/export_import.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} export_import_${family} ${${upper}_RUN})
  set_tests_properties(ckpt.export_import_${family} PROPERTIES TIMEOUT 300)
endforeach()
# A bf16 run: model/ exports its bf16 working weights as BF16, the training checkpoint its f32
# master weights as F32 (or, with --dtype bf16, rounded to model/'s bytes).
add_test(NAME ckpt.export_bf16
         COMMAND ${CKPT}/export_bf16.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                 ${CKPT_OUT} export_bf16 ${MICRO_RUN})
set_tests_properties(ckpt.export_import ckpt.export_bf16 PROPERTIES TIMEOUT 300)
# Besides the weights: a training checkpoint's export takes the tokenizer of the run's model/
# (when the fingerprints agree), tokenizer_config.json and config.json describe the model
# (model_max_length, bos/eos ids), a re-export says which files it replaces and removes, and
# shards under another name than model.safetensors are refused.
add_test(NAME ckpt.export_details
         COMMAND ${CKPT}/export_details.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MPI_DATA})
set_tests_properties(ckpt.export_details PROPERTIES TIMEOUT 120)
set_tests_properties(ckpt.export_import PROPERTIES FIXTURES_SETUP hf_export)
# A file whose shapes do not fit the model (another MLP width): refused on every rank, reported
# by one, under mpirun.
add_test(NAME ckpt.init_from_wrong_shape_under_mpirun
         COMMAND ${MPI_ENV} ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "mlp.c_fc.weight has shape \\[64, 512\\] but the model expects \\[64, 256\\]"
                 ${MPIRUN} -q -np 2 --oversubscribe $<TARGET_FILE:kintsugi> train ${MICRO_RUN}
                 --set model.d_ff=256 --tp 2
                 --init-from ${CKPT_OUT}/export_import/hf/model.safetensors
                 --out ${CKPT_OUT}/init_from_wrong_shape)
set_tests_properties(ckpt.init_from_wrong_shape_under_mpirun PROPERTIES
                     FIXTURES_REQUIRED hf_export PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 60)
# Well-formed weights that are not finite are refused at load, naming the tensor.
add_test(NAME ckpt.init_from_nan_refused
         COMMAND sh -c "python3 ${CKPT}/poison_safetensors.py $1 $2 transformer.h.1.mlp.c_fc.weight && shift 2 && exec \"$@\""
                 poison ${CKPT_OUT}/export_import/hf/model.safetensors ${CKPT_OUT}/nan.safetensors
                 ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh
                 "tensor transformer.h.1.mlp.c_fc.weight holds nan at element 5"
                 $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --init-from ${CKPT_OUT}/nan.safetensors
                 --out ${CKPT_OUT}/init_from_nan)
set_tests_properties(ckpt.init_from_nan_refused PROPERTIES FIXTURES_REQUIRED hf_export TIMEOUT 60)
# Hugging Face model folders (docs/checkpoints.md): the exporter's sharded layout (from each
# family's run) and hand-made folders (shards and index, bf16, f32 and both, tied and untied
# heads, GQA, GPT2Model's names) start a run with --init-from FOLDER where the same weights as
# one file start, serially and on tp 2 and pp 2, the model's shape taken from config.json.
foreach(family gpt2 llama bloom)
  if(family STREQUAL gpt2)
    set(run ${MICRO_RUN})
  else()
    string(TOUPPER ${family} upper)
    set(run ${${upper}_RUN})
  endif()
  add_test(NAME ckpt.hf_folder_export_${family}
           COMMAND ${CKPT}/hf_folder_export.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} hf_folder_export_${family} 200KB ${run})
  set_tests_properties(ckpt.hf_folder_export_${family} PROPERTIES PROCESSORS 2 TIMEOUT 300)
endforeach()
function(hf_folder_test name)
  add_test(NAME ckpt.hf_folder_${name}
           COMMAND ${CKPT}/hf_folder.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${MPI_DATA} hf_folder_${name} ${ARGN})
  set_tests_properties(ckpt.hf_folder_${name} PROPERTIES PROCESSORS 2 TIMEOUT 300)
endfunction()
hf_folder_test(llama_gqa_bf16_3_shards llama 3 bf16 gqa)
hf_folder_test(llama_tied_f32_2_shards llama 2 f32 tied)
hf_folder_test(llama_mixed_4_shards llama 4 mixed)
hf_folder_test(gpt2_bf16_2_shards_no_prefix gpt2 2 bf16 noprefix)
hf_folder_test(gpt2_f32_one_file gpt2 1 f32)
hf_folder_test(qwen3_gqa_bf16_2_shards qwen3 2 bf16 gqa)
# A folder used without training: import writes a model directory that export turns back into
# every tensor of the folder bit for bit; generate --init-from FOLDER prints the import's text.
function(hf_import_test name)
  add_test(NAME ckpt.hf_import_${name}
           COMMAND ${CKPT}/hf_import.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MPI_DATA}
                   hf_import_${name} ${ARGN})
  set_tests_properties(ckpt.hf_import_${name} PROPERTIES TIMEOUT 120)
endfunction()
hf_import_test(llama_gqa_tied_bf16_3_shards llama 3 bf16 gqa tied)
hf_import_test(gpt2_f32_one_file gpt2 1 f32)
# Qwen3 (q_norm and k_norm of head_dim 16 apart from hidden_size / heads, Qwen3Config's fields).
hf_import_test(qwen3_gqa_tied_bf16_2_shards qwen3 2 bf16 gqa tied)
# A tied folder trained with model.tie_embeddings = "untied": the head starts as the embedding's
# copy (the tied run's first loss) and trains apart from it (exported lm_head.weight differs).
foreach(family llama qwen3)
  add_test(NAME ckpt.hf_untie_${family}
           COMMAND ${CKPT}/hf_untie.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MPI_DATA}
                   hf_untie_${family} ${family} f32)
  set_tests_properties(ckpt.hf_untie_${family} PROPERTIES TIMEOUT 120)
endforeach()
# Folders whose config.json is the family's as its models ship it (tests/fixtures/hf): imported
# and exported bit for bit, trained serially and on tp 2, exported with the family's fields and
# read back.
foreach(fixture llama3.1 mistral qwen2.5 qwen3)
  add_test(NAME ckpt.hf_fixture_${fixture}
           COMMAND ${CKPT}/hf_fixture.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${MPI_DATA} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/hf/${fixture}
                   hf_fixture_${fixture})
  set_tests_properties(ckpt.hf_fixture_${fixture} PROPERTIES PROCESSORS 8 TIMEOUT 300)
endforeach()
# Mixtures of experts as Mixtral, Qwen2-MoE (a shared expert) and Qwen3-MoE ship them: the same,
# on pp 2 x dp 2 with ZeRO-1 (experts are not split over tp). qwen2_moe_dense: Qwen2-MoE with
# dense layers (decoder_sparse_step 2, mlp_only_layers [3]: dense, MoE, dense, dense).
foreach(fixture mixtral qwen2_moe qwen3_moe qwen2_moe_dense)
  add_test(NAME ckpt.hf_fixture_${fixture}
           COMMAND ${CKPT}/hf_fixture.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${MPI_DATA} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/hf/${fixture}
                   hf_fixture_${fixture} --pp 2 --dp 2 --zero 1)
  set_tests_properties(ckpt.hf_fixture_${fixture} PROPERTIES PROCESSORS 4 TIMEOUT 300)
endforeach()
# Damaged or unsupported folders: one line naming the problem, exit 1, nothing trained.
function(hf_folder_refused_test kind pattern)
  add_test(NAME ckpt.hf_folder_refused.${kind}
           COMMAND ${CKPT}/hf_folder_refused.sh ${kind} ${pattern} $<TARGET_FILE:kintsugi>
                   ${CKPT_OUT} ${MPI_DATA} ${ARGN})
  set_tests_properties(ckpt.hf_folder_refused.${kind} PROPERTIES TIMEOUT 120)
endfunction()
hf_folder_refused_test(missing_shard "model-00002-of-00003.safetensors is missing: .*index.json names it")
hf_folder_refused_test(truncated_shard
                       "model-00003-of-00003.safetensors is truncated or corrupt: tensor lm_head.weight")
hf_folder_refused_test(index_names_missing_tensor
                       "names tensor model.layers.0.mlp.up_proj.bias in model-00002-of-00003.safetensors, which does not hold it")
hf_folder_refused_test(index_omits_tensor
                       "holds tensor model.norm.weight, which model.safetensors.index.json does not name")
hf_folder_refused_test(shape_mismatch
                       "mlp.gate_proj.weight has shape \\[64, 32\\] but the model expects \\[48, 32\\]")
hf_folder_refused_test(rope_scaling "config.json: rope_scaling.type = \"dynamic\" is not supported")
hf_folder_refused_test(activation "config.json: hidden_act = \"gelu\" is not supported")
hf_folder_refused_test(attention_bias "config.json: attention_bias = true is not supported")
hf_folder_refused_test(unknown_field "config.json: field sliding_window is not one kintsugi knows")
hf_folder_refused_test(other_family "config.json: model_type = \"gemma2\" is not supported")
# Values no model can have are named as the file's fields, not as model.* keys.
hf_folder_refused_test(zero_rms_norm_eps "config.json: rms_norm_eps = 0 must be positive")
hf_folder_refused_test(contradicts_config
                       "model.d_ff = 128 contradicts .*config.json \\(intermediate_size gives 64\\)"
                       --set model.d_ff=128)
# config.json's blocks against the weights' own, before anything is built per block (under a
# memory cap: a regression fails at once instead of exhausting the machine).
add_test(NAME ckpt.hf_folder_refused.layers_disagree
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/under_memory_cap.sh 4000000
                 ${CKPT}/hf_folder_refused.sh layers_disagree
                 "config.json gives num_hidden_layers = 1000000000 but .*model.safetensors.index.json holds the tensors of 2 blocks"
                 $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MPI_DATA})
set_tests_properties(ckpt.hf_folder_refused.layers_disagree PROPERTIES TIMEOUT 120)
hf_folder_refused_test(sentencepiece_only
                       "holds tokenizer.model \\(SentencePiece\\) but no tokenizer.json: .*add the model's tokenizer.json .*, or set data.tokenizer")
# A tokenizer with more ids than config.json's vocab_size (the data's ids fit): refused before
# the data is compared with it.
hf_folder_refused_test(tokenizer_past_vocabulary
                       "init-from .*folder has 513 ids, more than the model's vocabulary of 512 \\(model.vocab_size, from the folder's config.json\\): ids from 512 on would have no embedding row")
add_test(NAME ckpt.hf_folder_refused.missing_shard_under_mpirun
         COMMAND ${CMAKE_COMMAND} -E env RANKS=2
                 ${CKPT}/hf_folder_refused.sh missing_shard "model-00002-of-00003.safetensors is missing"
                 $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MPI_DATA} --tp 2)
set_tests_properties(ckpt.hf_folder_refused.missing_shard_under_mpirun PROPERTIES
                     PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 120)
add_test(NAME ckpt.export_from_sharded_checkpoint
         COMMAND ${CKPT}/export_sharded.sh $<TARGET_FILE:kintsugi>
                 ${CKPT_OUT}/reshard_tp2_pp2_dp2_to_serial/full ${CKPT_OUT})
set_tests_properties(ckpt.export_from_sharded_checkpoint PROPERTIES FIXTURES_REQUIRED sharded_checkpoint
                                                                   TIMEOUT 60)

# Pre-emption through the launcher: TERM to mpirun in the middle of a step of seconds, and in
# the middle of an evaluation; the last completed step is saved within Open MPI's kill delay
# and resumes bit for bit. ZeRO-2 keeps gradient reductions in flight between micro-batches.
# One processor each (MPI_WAITING_PROCESSORS), though two ranks run: ~13 of a test's ~18 s are
# waits (Open MPI's 8-s delay, micro-batches that sleep 1 s). The ranks' time to save stays ~5 s
# (stop_mid_step.sh) for a checkpoint saved in ~0.05 s.
foreach(phase train eval)
  add_test(NAME ckpt.stop_mid_${phase}_under_mpirun
           COMMAND ${CKPT}/stop_mid_step.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${phase} 2 ${MICRO_RUN} --dp 2 --zero 2)
  set_tests_properties(ckpt.stop_mid_${phase}_under_mpirun PROPERTIES
                       PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 180)
  # Two pipeline stages are at different micro-batches when the signal comes: each drains.
  add_test(NAME ckpt.stop_mid_${phase}_pp2_under_mpirun
           COMMAND ${CKPT}/stop_mid_step.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                   ${CKPT_OUT} ${phase} 2 ${MICRO_RUN} --pp 2 --dp 1)
  set_tests_properties(ckpt.stop_mid_${phase}_pp2_under_mpirun PROPERTIES
                       PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 180 ENVIRONMENT SEQUENCES=24)
endforeach()
# Pre-emption as schedulers signal, three times 0.2 s apart: USR1 to mpirun (passed on at once),
# TERM to scripts/preemptible.sh or to its process group (turned into USR1) all end in a saved,
# resumable step and exit 0; TERM to mpirun itself saves nothing (Open MPI exits on the second
# one), and in every case no rank outlives mpirun (docs/checkpoints.md).
foreach(case usr1_mpirun term_wrapper term_group term_bare)
  add_test(NAME ckpt.preempt_${case}
           COMMAND ${CKPT}/preempt_under_mpirun.sh $<TARGET_FILE:kintsugi>
                   ${PROJECT_SOURCE_DIR}/scripts/preemptible.sh ${CKPT_OUT} ${case} ${MICRO_RUN})
  set_tests_properties(ckpt.preempt_${case} PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                        TIMEOUT 300)
endforeach()
# The wrapper's own status under repeated signals, without MPI (scripts/preemptible.sh).
add_test(NAME ckpt.preemptible_wrapper_status
         COMMAND ${CKPT}/preemptible_wrapper_status.sh ${PROJECT_SOURCE_DIR}/scripts/preemptible.sh)
set_tests_properties(ckpt.preemptible_wrapper_status PROPERTIES PROCESSORS 1 TIMEOUT 120)
# One writer per --out: a second job is refused, naming the first one's host and pid.
add_test(NAME ckpt.second_writer_refused
         COMMAND ${CKPT}/second_writer.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.second_writer_refused PROPERTIES PROCESSORS ${MPI_WAITING_PROCESSORS}
                                                          TIMEOUT 120)
# The metrics file is the run's too, wherever --metrics puts it: a second job naming it (with
# --overwrite, which would empty it) is refused.
add_test(NAME ckpt.second_writer_of_metrics_refused
         COMMAND ${CKPT}/second_writer_metrics.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.second_writer_of_metrics_refused PROPERTIES TIMEOUT 120)
# An MPMD launch whose ranks disagree on --out or on --overwrite/--resume: refused before rank 0
# removes anything.
add_test(NAME ckpt.mpmd_flags_disagree_refused
         COMMAND ${CKPT}/mpmd_flags.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.mpmd_flags_disagree_refused PROPERTIES
                     PROCESSORS ${MPI_WAITING_PROCESSORS} TIMEOUT 120)

# Output that cannot be written: a full disk under metrics.jsonl (the finished step is saved
# first), a directory where loss.svg goes, and a log file that must keep its lines when the
# process is killed.
foreach(case metrics plot log)
  add_test(NAME cli.write_failure_${case}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/write_failures.sh ${case} $<TARGET_FILE:kintsugi>
                   ${CKPT_OUT} ${MICRO_RUN} --set train.steps=2)
  set_tests_properties(cli.write_failure_${case} PROPERTIES TIMEOUT 120)
endforeach()

# Resuming with another train.seed changes the data order: said, not silent.
add_test(NAME ckpt.resume_with_other_seed_warns
         COMMAND $<TARGET_FILE:kintsugi> train ${MICRO_RUN} --set train.steps=3 --set train.seed=777
                 --resume ${GOOD_CKPT} --out ${CKPT_OUT}/other_seed)
set_tests_properties(ckpt.resume_with_other_seed_warns PROPERTIES
                     FIXTURES_REQUIRED serial_checkpoint TIMEOUT 60 ENVIRONMENT OMP_NUM_THREADS=1
                     PASS_REGULAR_EXPRESSION "warning: .*step-00000002 was saved by a run with train.seed = [0-9]+; this run has 777")
# A token file truncated while the run reads it: the file named, exit 1, no bus error.
add_test(NAME cli.token_file_truncated_mid_run
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/token_file_truncated.sh $<TARGET_FILE:kintsugi>
                 ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(cli.token_file_truncated_mid_run PROPERTIES TIMEOUT 120)
# A diverged run saves nothing and names the last good checkpoint.
add_test(NAME ckpt.diverged_state_not_saved
         COMMAND ${CKPT}/diverged.sh $<TARGET_FILE:kintsugi> ${GOOD_CKPT} ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.diverged_state_not_saved PROPERTIES FIXTURES_REQUIRED serial_checkpoint
                                                              TIMEOUT 60)

# A resume that changes the global batch counts the earlier steps at their own batch.
add_test(NAME ckpt.tokens_seen_across_batch_change
         COMMAND ${CKPT}/tokens_seen.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.tokens_seen_across_batch_change PROPERTIES TIMEOUT 300)
# The save on a stop signal checks for divergence too, and prunes nothing: a diverged state
# signalled in the next step is not saved, and the last sound checkpoint stays `latest`.
add_test(NAME ckpt.diverged_state_not_saved_on_stop
         COMMAND ${CKPT}/diverged_on_stop.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.diverged_state_not_saved_on_stop PROPERTIES TIMEOUT 120)

# Fine-tuning from a kintsugi run (weights only: step 0, fresh optimizer and schedule): serial
# from model/ against tp 2 x dp 2 (ZeRO-1) and pp 2 x dp 2 from the training checkpoint.
add_test(NAME ckpt.finetune_from_model_tp2_dp2
         COMMAND ${CKPT}/finetune.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                 ${CKPT_OUT}/finetune_tp2 "4 --tp 2 --dp 2 --zero 1" ${MICRO_RUN})
add_test(NAME ckpt.finetune_from_model_pp2_dp2
         COMMAND ${CKPT}/finetune.sh $<TARGET_FILE:kintsugi> $<TARGET_FILE:check_run>
                 ${CKPT_OUT}/finetune_pp2 "4 --pp 2 --dp 2" ${MICRO_RUN})
set_tests_properties(ckpt.finetune_from_model_tp2_dp2 ckpt.finetune_from_model_pp2_dp2
                     PROPERTIES PROCESSORS 4 TIMEOUT 300)
# model.seq_len changed on resume and fine-tuning: RoPE and ALiBi any length, learned positions
# shorter only (longer refused with the reason).
foreach(family gpt2 llama bloom)
  if(family STREQUAL "gpt2")
    set(run ${MICRO_RUN})
  else()
    string(TOUPPER ${family} upper)
    set(run ${${upper}_RUN})
  endif()
  add_test(NAME ckpt.seq_len_change_${family}
           COMMAND ${CKPT}/seq_len_change.sh $<TARGET_FILE:kintsugi>
                   ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh ${CKPT_OUT} ${family} ${run})
  set_tests_properties(ckpt.seq_len_change_${family} PROPERTIES TIMEOUT 300)
endforeach()
# Token files and models carry their tokenizer's identity; train, generate, eval and
# fine-tuning refuse a mismatch.
add_test(NAME ckpt.tokenizer_identity
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/tokenizer_identity.sh $<TARGET_FILE:kintsugi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh ${CKPT_OUT} ${MPI_DATA} ${MICRO_RUN}
                 --set data.tokenizer=${MPI_DATA}/gpt2-tokenizer --set model.vocab_size=50257)
set_tests_properties(ckpt.tokenizer_identity PROPERTIES TIMEOUT 300)
# What used to train unchecked: Megatron data against data.tokenizer's vocabulary (train, eval),
# and a data.tokenizer that does not load.
add_test(NAME ckpt.tokenizer_unchecked
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/tokenizer_unchecked.sh $<TARGET_FILE:kintsugi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh ${CKPT_OUT} ${MPI_DATA}
                 ${MICRO_RUN} --set data.tokenizer=${MPI_DATA}/gpt2-tokenizer
                 --set model.vocab_size=50257)
set_tests_properties(ckpt.tokenizer_unchecked PROPERTIES TIMEOUT 300)
# <out>/config.toml: written by every run, taken by --resume without --config; every key a
# resume changes is listed.
add_test(NAME ckpt.resume_saved_config
         COMMAND ${CKPT}/resume_saved_config.sh $<TARGET_FILE:kintsugi> ${CKPT_OUT} ${MICRO_RUN})
set_tests_properties(ckpt.resume_saved_config PROPERTIES TIMEOUT 300)
