# Expert parallelism (docs/moe.md, "Expert parallelism"): configs/moe-tiny.toml in Llama's shape
# (mpi_tests.cmake's MOE_RUN: 8 experts of 44, top 2) over 15 steps, the experts split over ep
# of the data-parallel ranks. Each layout must end with the serial run's losses and weights
# (1e-5), move exactly the theoretical bytes (the step's own ep.all_to_all theory from its
# routing, edp.* for the experts' gradients, dp.* for the rest) and allocate exactly the
# theoretical memory. Uses mpi_tests.cmake's runs and functions.
set(MOE15_RUN ${MOE_RUN} --set train.steps=15)
set(MOESHARED15_RUN ${MOESHARED_RUN} --set train.steps=15)
# A capacity factor of 1: each expert keeps ceil(N top_k / experts) of a micro-batch's rows.
set(MOECAP_RUN ${MOE15_RUN} --set model.moe_capacity_factor=1.0)
serial_reference(moe15_serial ${MOE15_RUN})
serial_reference(moeshared15_serial ${MOESHARED15_RUN})
serial_reference(moecap_serial ${MOECAP_RUN})
family_layout_test(moe15 ep2 2 --dp 2 --ep 2)
family_layout_test(moe15 ep4 4 --dp 4 --ep 4)
# Expert data parallelism: two groups of 2 experts' ranks, each expert on 2 of the 4 ranks.
family_layout_test(moe15 dp4_ep2 4 --dp 4 --ep 2)
family_layout_test(moe15 ep2_pp2_1f1b 4 --dp 2 --ep 2 --pp 2 --schedule 1f1b)
family_layout_test(moe15 ep2_pp2_interleaved 4 --dp 2 --ep 2 --pp 2 --schedule interleaved
                   --virtual-stages 2)
family_layout_test(moe15 ep2_zero1 2 --dp 2 --ep 2 --zero 1)
family_layout_test(moe15 ep2_zero2 2 --dp 2 --ep 2 --zero 2)
# ZeRO-3: the experts' weights gathered over their 2 expert-data-parallel ranks.
family_layout_test(moe15 dp4_ep2_zero3 4 --dp 4 --ep 2 --zero 3)
# Tensor parallelism with sequence parallelism: experts replicated over tp, each tp rank
# running its own rows, routed with the whole micro-batch's (docs/moe.md "Tensor
# parallelism"); with expert parallelism over the data-parallel ranks beside it.
family_layout_test(moe15 tp2_sp 2 --tp 2 --sequence-parallel)
family_layout_test(moe15 ep2_tp2_sp 4 --dp 2 --ep 2 --tp 2 --sequence-parallel)
# Top 1 with a shared expert (Qwen2-MoE), and with full recomputation (the forward's exchange
# runs again in backward: its bytes are in the theory).
family_layout_test(moeshared15 ep2 2 --dp 2 --ep 2)
family_layout_test(moeshared15 ep2_tp2_sp_zero1 4 --dp 2 --ep 2 --tp 2 --sequence-parallel --zero 1)
family_layout_test(moeshared15 dp4_ep2_recompute_full 4 --dp 4 --ep 2 --recompute full)
# bf16 (the MoE ops staged through f32) tracks the serial bf16 run as mpi_tests.cmake's MoE
# mixed-precision layouts do (measured: losses 3.0e-5).
moe_mixed_test(moe_ep2_bf16 moe_serial_bf16 2 ${MOE_RUN} ${BF16_RUN} --dp 2 --ep 2)
# tp 2 + sp in bf16: tp rounds attention's partial sums in another order, which in bf16 moves a
# near-tie router logit: from the 11th layer forward on (step 1) some rows choose another expert
# than in the serial bf16 run (in fp32 every forward routes as the serial run). The losses stay
# within 1e-4 (measured 6.6e-5); the weights of the experts whose rows changed move by Adam's
# full steps, up to 0.25 relative on the small w2 matrices (measured; dense tp 2 bf16: 0.05).
add_test(NAME mpi.moe_tp2_sp_bf16
         COMMAND ${CMAKE_COMMAND} -E env REFERENCE=moe_serial_bf16 RTOL=1e-4 WEIGHT_RTOL=0.5
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${MPI_OUT} moe_tp2_sp_bf16 2 ${MOE_RUN} ${BF16_RUN}
                 --tp 2 --sequence-parallel)
set_tests_properties(mpi.moe_tp2_sp_bf16 PROPERTIES FIXTURES_REQUIRED moe_serial_bf16_run
                     PROCESSORS 2 TIMEOUT 300)
# Two runs of the same layout give the same bits.
add_test(NAME mpi.moe15_ep2_same_bits
         COMMAND ${CMAKE_COMMAND} -E env REFERENCE=moe15_ep2_kept RTOL=0
                 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/run_layout.sh $<TARGET_FILE:kintsugi>
                 $<TARGET_FILE:check_run> ${MPI_OUT} moe15_ep2_again 2 ${MOE15_RUN} --dp 2 --ep 2)
# (run_layout.sh removes a passing run: the reference is a run of its own, kept.)
add_test(NAME mpi.moe15_ep2_kept_reference
         COMMAND ${MPI_ENV} ${MPIRUN} -np 2 --oversubscribe --bind-to none $<TARGET_FILE:kintsugi>
                 train ${MOE15_RUN} --dp 2 --ep 2 --out ${MPI_OUT}/moe15_ep2_kept --overwrite)
set_tests_properties(mpi.moe15_ep2_kept_reference PROPERTIES FIXTURES_SETUP moe15_ep2_kept_run
                                                             PROCESSORS 2 TIMEOUT 300)
set_tests_properties(mpi.moe15_ep2_same_bits PROPERTIES FIXTURES_REQUIRED moe15_ep2_kept_run
                                                        PROCESSORS 2 TIMEOUT 300)

# Capacity factor: the serial run reports its drops every step; under ep 2 each rank applies
# the capacity to its own micro-batch, which is the serial run's micro-batch, so the drops and
# the losses are the serial run's; a second ep 2 run drops the same (deterministic).
family_layout_test(moecap ep2 2 --dp 2 --ep 2)
# Under sequence parallelism the capacity is the whole micro-batch's, as in the serial run.
family_layout_test(moecap tp2_sp 2 --tp 2 --sequence-parallel)
add_test(NAME mpi.moecap_ep2_dropped_reported
         COMMAND ${CMAKE_COMMAND} -E env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                 OMP_NUM_THREADS=1 sh -c "rm -rf ${MPI_OUT}/moecap_ep2_kept && ${MPIRUN} -np 2 --oversubscribe --bind-to none $<TARGET_FILE:kintsugi> train --out ${MPI_OUT}/moecap_ep2_kept $<JOIN:${MOECAP_RUN}, > --dp 2 --ep 2 > /dev/null && python3 ${CMAKE_CURRENT_SOURCE_DIR}/mpi/moe_dropped.py ${MPI_OUT}/moecap_serial ${MPI_OUT}/moecap_ep2_kept")
set_tests_properties(mpi.moecap_ep2_dropped_reported PROPERTIES FIXTURES_REQUIRED moecap_serial_run
                                                                PROCESSORS 2 TIMEOUT 300)

# Dense blocks among the MoE blocks (docs/moe.md, "Dense blocks"): block 0 dense
# (model.moe_first_dense_layers = 1), then every second block a MoE block
# (model.moe_layer_freq = 2): dense, dense, MoE, dense. Data parallelism, expert parallelism
# (the expert store holds block 2's experts alone), 1F1B with the stage boundary between
# block 1 (dense) and block 2 (MoE), and ZeRO-3 over dp 4 x ep 2, against the serial run at the
# bars above.
set(MOEDENSE_RUN ${MOE15_RUN} --set model.moe_first_dense_layers=1 --set model.moe_layer_freq=2)
serial_reference(moedense_serial ${MOEDENSE_RUN})
family_layout_test(moedense dp2_zero1 2 --dp 2 --zero 1)
family_layout_test(moedense ep2 2 --dp 2 --ep 2)
family_layout_test(moedense pp2_1f1b 2 --pp 2 --schedule 1f1b
                   --set "parallel.layers_per_stage=[2, 2]")
family_layout_test(moedense dp4_ep2_zero3 4 --dp 4 --ep 2 --zero 3)

# Evaluation of the serial run's model under ep 2, dp 4 x ep 2, tp 2 + sp and dp 2 x cp 2
# (uneven windows per rank): the serial loss of the same windows.
add_test(NAME mpi.moe15_ep_eval
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/mpi/eval_layouts.sh $<TARGET_FILE:kintsugi>
                 ${MPI_OUT}/moe15_serial/model ${TEST_VAL} 7 "2 --dp 2 --ep 2" "4 --dp 4 --ep 2"
                 "2 --tp 2 --sequence-parallel" "4 --dp 2 --cp 2")
set_tests_properties(mpi.moe15_ep_eval PROPERTIES FIXTURES_REQUIRED moe15_serial_run PROCESSORS 4
                                                  TIMEOUT 120)

# DeepSeek-style routing (docs/moe.md, "DeepSeek-style routing"): configs/moe-deepseek-tiny.toml
# in the tests' Llama shape (8 experts of 44 in 4 groups of 2, 2 groups kept, top 2, sigmoid
# scores scaled by 2.5, a shared expert) with the auxiliary-loss-free bias moved by 1e-2 a step
# (its loads summed over every micro-batch and rank, so each rank's bias is the serial run's),
# over 15 steps: dp 2, ep 2 and ep 2 x pp 2 against the serial run (losses and weights 1e-5).
set(MOEDS_RUN --config ${PROJECT_SOURCE_DIR}/configs/moe-deepseek-tiny.toml ${TEST_DATA}
              ${LLAMA_SHAPE} --set model.moe_expert_hidden=44 ${TEST_SCHEDULE}
              --set model.moe_router_bias_update_rate=1e-2 --set train.steps=15)
serial_reference(moeds_serial ${MOEDS_RUN})
family_layout_test(moeds dp2 2 --dp 2)
family_layout_test(moeds ep2 2 --dp 2 --ep 2)
family_layout_test(moeds ep2_pp2 4 --dp 2 --ep 2 --pp 2 --schedule 1f1b)
family_layout_test(moeds ep2_tp2_sp 4 --dp 2 --ep 2 --tp 2 --sequence-parallel)

# Bad input: one message (from one rank) before any work, non-zero exit, no hang.
function(expert_refused name ranks pattern)
  mpi_refused(ep_${name} ${ranks} "${pattern}" ${ARGN})
endfunction()
expert_refused(not_dividing_dp 2 "--ep 4 must divide the data-parallel ranks \\(dp = 2\\)"
               ${MOE_RUN} --dp 2 --ep 4)
expert_refused(experts 3 "--ep 3: model.moe_experts = 8 must be divisible by it"
               ${MOE_RUN} --set train.global_batch=6 --dp 3 --ep 3)
expert_refused(dense 2 "--ep 2 splits a mixture of experts' experts, but the model has none"
               ${MICRO_RUN} --dp 2 --ep 2)
expert_refused(hsdp 4 "--ep 2 with --hsdp 2: hybrid sharding of the experts' state is not built"
               ${MOE_RUN} --dp 4 --ep 2 --zero 1 --hsdp 2)
expert_refused(tp_without_sp 4 "under tensor parallelism \\(tp = 2\\) need sequence parallelism"
               ${MOE_RUN} --dp 2 --ep 2 --tp 2)
expert_refused(capacity 2 "model.moe_capacity_factor = -1 must not be negative"
               ${MOE_RUN} --dp 2 --ep 2 --set model.moe_capacity_factor=-1)

# The planner's memory for these runs' rank 0 (experts replicated over tp, split over ep).
plan_matches_family_runs(moe15
    "moe15_serial:1:${PLAN_SERIAL}"
    "moe15_ep2:2:--dp 2 --ep 2 --zero 0 --micro-batch 1 --recompute none"
    "moe15_tp2_sp:2:--tp 2 --tensor-grid none --sequence-parallel --zero 0 --micro-batch 1 --recompute none"
    "moe15_ep2_tp2_sp:4:--tp 2 --tensor-grid none --dp 2 --ep 2 --sequence-parallel --zero 0 --micro-batch 1 --recompute none")
# Full recomputation (the router's logits gathered again) with a pipeline under sp.
family_layout_test(moe15 tp2_sp_pp2_recompute_full 4 --tp 2 --sequence-parallel --pp 2
                   --schedule 1f1b --recompute full)
# Dense blocks: a layer frequency below 1, no block left for the experts.
expert_refused(dense_freq 2 "model.moe_layer_freq = 0 must be at least 1"
               ${MOE_RUN} --dp 2 --ep 2 --set model.moe_layer_freq=0)
expert_refused(dense_first 2 "model.moe_first_dense_layers = 4 must be between 0 and model.n_layer - 1 = 3"
               ${MOE_RUN} --dp 2 --ep 2 --set model.moe_first_dense_layers=4)

# Everything at once: DeepSeek-style routing with its balancing bias, a dense first block and
# MoE every other block after it (dense, dense, MoE, dense... : docs/moe.md "Dense blocks"),
# experts over ep 2 beside tp 2 with sequence parallelism, against its serial run.
set(MOEDSDENSE_RUN ${MOEDS_RUN} --set model.moe_first_dense_layers=1 --set model.moe_layer_freq=2)
serial_reference(moedsdense_serial ${MOEDSDENSE_RUN})
family_layout_test(moedsdense ep2_tp2_sp 4 --dp 2 --ep 2 --tp 2 --sequence-parallel)

# Context parallelism: each cp rank holds a share of every sequence and routes the whole
# micro-batch (the router's logits gathered over cp: docs/moe.md "Context parallelism"), with
# both exchanges, beside dp, and beside tp 2 + sp (gathered over tp, then cp).
family_layout_test(moe15 cp2 2 --cp 2)
family_layout_test(moe15 cp2_ring_dp2 4 --cp 2 --cp-comm ring --dp 2)
family_layout_test(moeds cp2_ring_tp2_sp 4 --cp 2 --cp-comm ring --tp 2 --sequence-parallel)
expert_refused(cp_capacity 2 "model.moe_capacity_factor = 1 with --cp 2"
               ${MOE_RUN} --cp 2 --set model.moe_capacity_factor=1.0)

# The balancing bias travels with the saved model: `kintsugi eval` of the serial run's
# <out>/model prints the run's own last validation loss (the same 3 windows; without the bias
# it prints 5.7e-4 more, measured), and `generate` runs it.
add_test(NAME mpi.moeds_saved_model_keeps_bias
         COMMAND sh -c "$<TARGET_FILE:kintsugi> eval --checkpoint ${MPI_OUT}/moeds_serial/model --data ${TEST_VAL} --windows 3 --json | tail -1 | python3 -c \"import json, sys; got = json.loads(sys.stdin.read())['loss']; run = [json.loads(l) for l in open('${MPI_OUT}/moeds_serial/metrics.jsonl')]; want = [s['val_loss'] for s in run if 'val_loss' in s][-1]; sys.exit(0 if abs(got - want) <= 1e-9 * abs(want) else f'eval {got} != the run\\'s {want}')\" && $<TARGET_FILE:kintsugi> generate --checkpoint ${MPI_OUT}/moeds_serial/model --tokens 8 > /dev/null")
set_tests_properties(mpi.moeds_saved_model_keeps_bias PROPERTIES FIXTURES_REQUIRED moeds_serial_run
                                                                TIMEOUT 120)
