# End-to-end tests of the `kintsugi` program: its help, the tokenizer round trip through the
# CLI, and clean one-line errors for bad input.
set(KINTSUGI_BIN $<TARGET_FILE:kintsugi>)
set(EXPECT_ERROR ${CMAKE_CURRENT_SOURCE_DIR}/cli/expect_error.sh)
set(TINY ${PROJECT_SOURCE_DIR}/configs/gpt-tiny.toml)

add_test(NAME cli.help COMMAND ${KINTSUGI_BIN} --help)
add_test(NAME cli.train_help_config COMMAND ${KINTSUGI_BIN} train --help-config)
set_tests_properties(cli.train_help_config PROPERTIES PASS_REGULAR_EXPRESSION "train.global_batch")

add_test(NAME cli.error.unknown_config_key
         COMMAND ${EXPECT_ERROR} "unknown key `train.lrr`"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.lrr=1)
add_test(NAME cli.error.batch_not_multiple
         COMMAND ${EXPECT_ERROR} "train.global_batch = 15 is not a multiple of train.micro_batch = 2"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.global_batch=15)
add_test(NAME cli.error.heads_do_not_divide
         COMMAND ${EXPECT_ERROR} "model.d_model = 128 is not divisible by model.n_head = 3"
                 ${KINTSUGI_BIN} train --config ${TINY} --set model.n_head=3)
add_test(NAME cli.error.wrong_type
         COMMAND ${EXPECT_ERROR} "`train.steps` must be integer"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.steps=1.5)
# A number TOML cannot hold is out of range, not of the wrong type.
add_test(NAME cli.error.integer_out_of_range
         COMMAND ${EXPECT_ERROR} "99999999999999999999 is out of range: integers run from -9223372036854775808 to 9223372036854775807"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.steps=99999999999999999999)
add_test(NAME cli.error.float_out_of_range
         COMMAND ${EXPECT_ERROR} "1e400 is out of range: not a finite number"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.lr=1e400)
# More micro-batches than a step's program holds: the global batch is named as too large, with
# the limit (parallel/layout_rules.cpp).
add_test(NAME cli.error.global_batch_too_large
         COMMAND ${EXPECT_ERROR} "train.global_batch = 4294967296 is too large: it makes 4294967296 micro-batches .* at most 1048576"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.global_batch=4294967296
                 --set train.micro_batch=1)
# An empty --resume (an unset variable in a script) would start the run over.
add_test(NAME cli.error.resume_empty
         COMMAND ${EXPECT_ERROR} "--resume '' names no checkpoint"
                 ${KINTSUGI_BIN} train --config ${TINY} --resume "")
# So would any empty flag value (the default it stands for), and an empty data.tokenizer (a run
# that checks no tokenizer and saves none).
add_test(NAME cli.error.flag_empty
         COMMAND ${EXPECT_ERROR} "--schedule '' is empty: give it a value, or drop --schedule"
                 ${KINTSUGI_BIN} train --config ${TINY} --schedule "")
add_test(NAME cli.error.tokenizer_empty
         COMMAND ${EXPECT_ERROR} "data.tokenizer is empty: name the data's tokenizer"
                 ${KINTSUGI_BIN} train --config ${TINY} --set data.tokenizer=)
# Absurd sizes are refused from the config's numbers before anything is built per block or per
# step, and a long schedule is never expanded; under a memory cap (cli/under_memory_cap.sh) a
# regression fails at once instead of exhausting the machine (train/model_fit.hpp,
# train/batch_rampup.hpp).
set(MEMORY_CAP ${CMAKE_CURRENT_SOURCE_DIR}/cli/under_memory_cap.sh 4000000)
add_test(NAME cli.error.model_does_not_fit
         COMMAND ${MEMORY_CAP} ${EXPECT_ERROR}
                 "the model does not fit: its 1.98e\\+14 parameters \\(model.n_layer = 1000000000, .* per rank at tp 1 x pp 1, ZeRO 0, more than the .* this machine has"
                 ${KINTSUGI_BIN} train --config ${TINY} --set model.n_layer=1000000000)
add_test(NAME cli.error.eval_model_does_not_fit
         COMMAND ${MEMORY_CAP} ${EXPECT_ERROR} "the model does not fit: .*model.n_layer = 1000000000"
                 ${KINTSUGI_BIN} eval --config ${TINY} --set model.n_layer=1000000000
                 --data ${PROJECT_SOURCE_DIR}/data/brown/val.bin --init-from never-read.safetensors)
add_test(NAME cli.error.tokens_past_64_bits
         COMMAND ${EXPECT_ERROR} "train.steps = 100000000000000000 x train.global_batch = 1000 x model.seq_len = 128 tokens is more than a run can count"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.steps=100000000000000000
                 --set train.global_batch=1000)
add_test(NAME cli.lazy_schedule_trillion_steps
         COMMAND ${MEMORY_CAP} ${CMAKE_CURRENT_SOURCE_DIR}/cli/lazy_schedule.sh ${KINTSUGI_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/lazy-schedule --config ${TINY}
                 --set data.train=${PROJECT_SOURCE_DIR}/data/brown/train.bin --set data.val=
                 --set data.tokenizer=${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2
                 --set model.seq_len=16 --set train.global_batch=32
                 "--set" "train.batch_rampup=[2, 2, 1000000]")
add_test(NAME cli.error.missing_config
         COMMAND ${EXPECT_ERROR} "config file .*nope.toml does not exist"
                 ${KINTSUGI_BIN} train --config nope.toml)
# --out must be a directory this run can create and lock (a file is not one).
set(TINY_DATA --set data.train=${PROJECT_SOURCE_DIR}/data/brown/train.bin
              --set data.val=${PROJECT_SOURCE_DIR}/data/brown/val.bin
              --set data.tokenizer=${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer)
add_test(NAME cli.error.out_is_a_file
         COMMAND ${EXPECT_ERROR} "--out .*cli_tests.cmake is a file, not a directory"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA}
                 --out ${CMAKE_CURRENT_SOURCE_DIR}/cli_tests.cmake)
add_test(NAME cli.error.out_cannot_be_created
         COMMAND ${EXPECT_ERROR} "--out .*cli_tests.cmake/run cannot be created"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA}
                 --out ${CMAKE_CURRENT_SOURCE_DIR}/cli_tests.cmake/run)
# GPT-2's token ids on a Llama preset: the data is what to change (data of the model's
# tokenizer), not the model's vocabulary.
add_test(NAME cli.error.data_of_another_tokenizer
         COMMAND ${EXPECT_ERROR}
                 "train.bin holds token id [0-9]+ \\(at position [0-9]+\\), beyond the model's vocabulary of 32000 \\(its header records a tokenizer of vocabulary 50257[^)]*\\): point data.train at data made with the model's tokenizer"
                 ${KINTSUGI_BIN} train --set model.preset=llama-tiny ${TINY_DATA}
                 --out ${CMAKE_CURRENT_BINARY_DIR}/cli-runs/data_of_another_tokenizer)
add_test(NAME cli.error.config_is_a_directory
         COMMAND ${EXPECT_ERROR} "config file .*configs/? is a directory"
                 ${KINTSUGI_BIN} train --config ${PROJECT_SOURCE_DIR}/configs)
add_test(NAME cli.error.lr_not_finite
         COMMAND ${EXPECT_ERROR} "`train.lr` = inf must be a finite number"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.lr=inf)
add_test(NAME cli.error.threads_past_cores
         COMMAND ${EXPECT_ERROR} "train.threads = 100000 is more than the [0-9]+ cores"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA} --set train.threads=100000)
add_test(NAME cli.error.token_file_is_a_directory
         COMMAND ${EXPECT_ERROR} "token file .*/data is a directory"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA}
                 --set data.train=${PROJECT_SOURCE_DIR}/data)
add_test(NAME cli.error.missing_token_file
         COMMAND ${EXPECT_ERROR} "missing.bin"
                 ${KINTSUGI_BIN} train --config ${TINY} --set data.train=missing.bin)
# train.steps = 0 is refused, naming eval and import, the commands that use a model untrained.
add_test(NAME cli.error.train_zero_steps
         COMMAND ${EXPECT_ERROR} "train.steps = 0 must be positive \\(to measure a model's loss without training it, use `kintsugi eval`; to save a Hugging Face model folder as a kintsugi model without training it, `kintsugi import`\\)"
                 ${KINTSUGI_BIN} train --config ${TINY} --set train.steps=0)
add_test(NAME cli.error.missing_checkpoint
         COMMAND ${EXPECT_ERROR} "--checkpoint /nonexistent does not exist"
                 ${KINTSUGI_BIN} generate --checkpoint /nonexistent --tokenizer
                 ${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer)
add_test(NAME cli.error.checkpoint_without_manifest
         COMMAND ${EXPECT_ERROR} "configs is not a kintsugi model checkpoint \\(no manifest.json\\)"
                 ${KINTSUGI_BIN} generate --checkpoint ${PROJECT_SOURCE_DIR}/configs)
# A file given as the checkpoint is named as such, from a directory without data/: not the
# default tokenizer (data/gpt2-tokenizer, relative), which is read only for a real checkpoint.
add_test(NAME cli.error.checkpoint_is_a_file
         COMMAND ${EXPECT_ERROR} "--checkpoint .*gpt-tiny.toml is a file, not a checkpoint directory"
                 ${KINTSUGI_BIN} generate --checkpoint ${TINY}
         WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# Sampling settings that would sample without a word: NaN passes a range check, inf divides
# every logit to zero.
foreach(t nan inf -1)
  add_test(NAME cli.error.generate_temperature_${t}
           COMMAND ${EXPECT_ERROR} "--temperature -?${t} must be a finite number >= 0"
                   ${KINTSUGI_BIN} generate --checkpoint /nonexistent --temperature=${t})
endforeach()
# More eval windows than the file holds would score overlapping windows (1e9: for weeks).
add_test(NAME cli.error.eval_windows_past_the_file
         COMMAND ${EXPECT_ERROR}
                 "--windows 1000000000 is more than the [0-9]+ windows of 128 tokens .*val.bin holds: give at most"
                 ${KINTSUGI_BIN} eval --config ${TINY} --init-from /nonexistent.safetensors
                 --data ${PROJECT_SOURCE_DIR}/data/brown/val.bin --windows 1000000000)
add_test(NAME cli.error.jsonl_bad_record
         COMMAND ${EXPECT_ERROR} "bad.jsonl:4: the record has no \"text\" key"
                 ${KINTSUGI_BIN} data tokenize --jsonl --out ${CMAKE_CURRENT_BINARY_DIR}/bad.bin
                 --tokenizer ${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bad.jsonl)
# Inputs of no documents make no token file (one of 0 tokens no run can read), in either format.
add_test(NAME cli.error.tokenize_empty_jsonl
         COMMAND ${EXPECT_ERROR} "empty.jsonl holds no documents: no tokens to write"
                 ${KINTSUGI_BIN} data tokenize --jsonl --out ${CMAKE_CURRENT_BINARY_DIR}/empty.bin
                 --tokenizer ${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/empty.jsonl)
add_test(NAME cli.error.tokenize_empty_jsonl_megatron
         COMMAND ${EXPECT_ERROR} "empty.jsonl holds no documents: no tokens to write"
                 ${KINTSUGI_BIN} data tokenize --jsonl --format megatron
                 --out ${CMAKE_CURRENT_BINARY_DIR}/empty-megatron
                 --tokenizer ${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/empty.jsonl)
add_test(NAME cli.error.tokenizer_model_type
         COMMAND ${EXPECT_ERROR} "model type \"WordPiece\" is not supported"
                 ${KINTSUGI_BIN} encode --tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tokenizer/wordpiece)
# A NUL byte quoted from a file is escaped, not the end of the message.
add_test(NAME cli.error.nul_byte_in_quoted_content
         COMMAND ${EXPECT_ERROR} "model type \"Word\\\\x00Piece\" is not supported"
                 ${KINTSUGI_BIN} encode --tokenizer ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tokenizer/nul-in-type)
# An --out that is a file the command reads (an input, another name for it, Megatron's
# PREFIX.bin, the tokenizer) would be replaced by the output: refused, the files unchanged.
add_test(NAME cli.error.tokenize_over_input
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/tokenize_over_input.sh ${KINTSUGI_BIN}
                 ${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenize-over-input)
# Values that crashed the program once (std::terminate, SIGFPE, bad_alloc): one line, exit 1.
add_test(NAME cli.error.empty_data_train
         COMMAND ${EXPECT_ERROR} "data.train is empty: name a token file"
                 ${KINTSUGI_BIN} train --config ${TINY} --set "data.train=\"\""
                 --out ${CMAKE_CURRENT_BINARY_DIR}/empty-data-train)
add_test(NAME cli.error.zero_heads
         COMMAND ${EXPECT_ERROR} "model.n_head = 0 must be positive"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA} --set model.n_head=0)
foreach(command encode tokenize)
  set(args encode)
  if(command STREQUAL tokenize)
    set(args data tokenize --out ${CMAKE_CURRENT_BINARY_DIR}/huge-id.bin ${TINY})
  endif()
  add_test(NAME cli.error.tokenizer_id_past_vocabulary_${command}
           COMMAND ${EXPECT_ERROR}
                   "the id of token \"<big>\" is 2000000000, but the file defines 3 tokens"
                   ${KINTSUGI_BIN} ${args} --tokenizer
                   ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tokenizer/huge_id)
endforeach()
add_test(NAME cli.error.tune_out_is_a_file
         COMMAND ${EXPECT_ERROR} "--out .*cli_tests.cmake is a file, not a directory"
                 ${KINTSUGI_BIN} tune --config ${TINY} ${TINY_DATA}
                 --out ${CMAKE_CURRENT_SOURCE_DIR}/cli_tests.cmake)
# tune takes plan's layout pins, each value checked before anything runs.
add_test(NAME cli.error.tune_pin_out_of_range
         COMMAND ${EXPECT_ERROR} "--zero 5: parallel.zero = 5 must be 0, 1, 2 or 3"
                 ${KINTSUGI_BIN} tune --config ${TINY} ${TINY_DATA} --zero 5)
# CPU runs cannot refit a GPU cluster's spec (and its node of 8 set the ranks launched here):
# refused before any run. A cluster spec with NaN, inf, 0 or an unknown key is refused by name.
add_test(NAME cli.error.tune_gpu_spec_from_cpu_runs
         COMMAND ${EXPECT_ERROR} "--cluster dgx-h100 describes another machine's devices, and tune measures on this machine's CPU"
                 ${KINTSUGI_BIN} tune --config ${TINY} ${TINY_DATA} --cluster dgx-h100 --ranks 2
                 --out ${CMAKE_BINARY_DIR}/runs/cli-tune-gpu-spec)
add_test(NAME cli.error.cluster_spec_not_finite
         COMMAND ${CMAKE_COMMAND} -E env bash -c
                 "sed 's/^bandwidth_gbs = 450/bandwidth_gbs = nan/' ${PROJECT_SOURCE_DIR}/configs/clusters/dgx-h100.toml > ${CMAKE_BINARY_DIR}/nan-cluster.toml && ${EXPECT_ERROR} '`intra_node.bandwidth_gbs` = nan must be a finite number' ${KINTSUGI_BIN} plan --config ${TINY} --cluster ${CMAKE_BINARY_DIR}/nan-cluster.toml")
# A directory where a file is to be written: refused before any work, not "wrote" and exit 0.
add_test(NAME cli.error.trace_is_a_directory
         COMMAND ${EXPECT_ERROR} "--trace .*tests/? is a directory: name the file to write"
                 ${KINTSUGI_BIN} train --config ${TINY} ${TINY_DATA}
                 --trace ${CMAKE_CURRENT_SOURCE_DIR} --out ${CMAKE_CURRENT_BINARY_DIR}/trace-dir)
add_test(NAME cli.error.plan_write_config_is_a_directory
         COMMAND ${EXPECT_ERROR} "--write-config .*tests/? is a directory"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --top 1
                 --write-config ${CMAKE_CURRENT_SOURCE_DIR})
add_test(NAME cli.error.unknown_preset
         COMMAND ${EXPECT_ERROR} "unknown model preset \"gpt5\""
                 ${KINTSUGI_BIN} bench step --model gpt5)

# An unknown or missing subcommand is named, with the subcommands there are.
add_test(NAME cli.error.unknown_subcommand
         COMMAND ${EXPECT_ERROR} "unknown subcommand \"frob\" of kintsugi: the subcommands are train, eval, "
                 ${KINTSUGI_BIN} frob)
add_test(NAME cli.error.unknown_data_subcommand
         COMMAND ${EXPECT_ERROR} "unknown subcommand \"frob\" of kintsugi data: the subcommands are brown, tokenize, info"
                 ${KINTSUGI_BIN} data frob)
add_test(NAME cli.error.missing_subcommand
         COMMAND ${EXPECT_ERROR} "kintsugi needs a subcommand: train, eval, " ${KINTSUGI_BIN})

add_test(NAME cli.layout COMMAND ${KINTSUGI_BIN} layout --world 16 --tp 2 --pp 2 --ranks-per-node 4)
set_tests_properties(cli.layout PROPERTIES PASS_REGULAR_EXPRESSION
                     "tp groups \\(8 of 2 ranks, 0 crossing nodes\\): \\[0 1\\] \\[2 3\\]")
# Context-parallel ranks right after the tensor-parallel ones.
add_test(NAME cli.layout_cp COMMAND ${KINTSUGI_BIN} layout --world 8 --tp 2 --cp 2)
set_tests_properties(cli.layout_cp PROPERTIES PASS_REGULAR_EXPRESSION
                     "cp groups \\(4 of 2 ranks, 0 crossing nodes\\): \\[0 2\\] \\[1 3\\]")
add_test(NAME cli.error.layout_world_mismatch
         COMMAND ${EXPECT_ERROR} "change --dp to 4 or launch 6 ranks" ${KINTSUGI_BIN} layout --world 8 --tp 2 --dp 3)
# One flag per layout key, made from the config key table (docs/parallelism.md, "Layout flags").
add_test(NAME cli.layout_flags COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/layout_flags.sh ${KINTSUGI_BIN})
add_test(NAME cli.error.layout_flag_not_a_number
         COMMAND ${EXPECT_ERROR} "--tp two must be a whole number"
                 ${KINTSUGI_BIN} train --config ${TINY} --tp two)
add_test(NAME cli.error.layout_flag_not_a_boolean
         COMMAND ${EXPECT_ERROR} "--sequence-parallel=maybe must be true or false"
                 ${KINTSUGI_BIN} train --config ${TINY} --sequence-parallel=maybe)
add_test(NAME cli.error.layout_flag_bad_list
         COMMAND ${EXPECT_ERROR} "--layers-per-stage 2,x must be whole numbers separated by commas"
                 ${KINTSUGI_BIN} eval --checkpoint nowhere --data nowhere.bin --layers-per-stage 2,x)
add_test(NAME cli.error.layout_pin_not_a_boolean
         COMMAND ${EXPECT_ERROR} "--sequence-parallel=true,on must be true, false or true,false"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --sequence-parallel=true,on)
add_test(NAME cli.layout_order_flag
         COMMAND ${KINTSUGI_BIN} layout --world 8 --tp 2 --pp 2 --order dp-tp-pp)
set_tests_properties(cli.layout_order_flag PROPERTIES PASS_REGULAR_EXPRESSION
                     "order dp-tp-pp.*tp groups \\(4 of 2 ranks, 0 crossing nodes\\): \\[0 2\\]")
add_test(NAME cli.error.tp_without_mpirun
         COMMAND ${EXPECT_ERROR} "the job has 1 rank, not a multiple of tp 2 x pp 1: launch a multiple of 2 ranks \\(mpirun -np 2"
                 ${KINTSUGI_BIN} train --config ${TINY} --tp 2)

# The planner (docs/planner.md). The local cluster needs the links between ranks measured once.
add_test(NAME cli.bench_comm
         COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1
                 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
                 mpirun -q -np 2 --oversubscribe --bind-to none ${KINTSUGI_BIN} bench comm)
set_tests_properties(cli.bench_comm PROPERTIES FIXTURES_SETUP local_links PROCESSORS 2
                     PASS_REGULAR_EXPRESSION "latency .* us, bandwidth .* GB/s")
add_test(NAME cli.plan_table
         COMMAND ${KINTSUGI_BIN} plan --model llama-13b --cluster gaudi2 --nodes 8
                 --global-batch 256 --seq 2048)
set_tests_properties(cli.plan_table PROPERTIES PASS_REGULAR_EXPRESSION
                     "valid layouts, [0-9]+ fit in 96 GB.*tokens/s +MFU\n  1 tp ")
set_tests_properties(cli.plan_table PROPERTIES FAIL_REGULAR_EXPRESSION "note: global batch")
# Without --global-batch the planner says it used the default, and the table explains itself.
add_test(NAME cli.plan_explains_defaults_and_columns
         COMMAND ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --nodes 1 --top 1)
set_tests_properties(cli.plan_explains_defaults_and_columns PROPERTIES PASS_REGULAR_EXPRESSION
                     "note: global batch 16 sequences \\(16384 tokens per step\\) is kintsugi's default.*step +tokens/s +MFU.*vN model chunks.*hsdpN ZeRO sharded.*sp sequence parallelism.*MFU: model FLOPs.*--wide adds")
# A config's global batch is the run's even when it equals the default (gpt-tiny sets 16): no note.
add_test(NAME cli.plan_config_batch_is_the_runs
         COMMAND ${KINTSUGI_BIN} plan --config ${TINY} --cluster dgx-h100 --nodes 1 --top 1)
set_tests_properties(cli.plan_config_batch_is_the_runs PROPERTIES
                     PASS_REGULAR_EXPRESSION "global batch 16 x seq"
                     FAIL_REGULAR_EXPRESSION "kintsugi's default")
add_test(NAME cli.plan_json COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_json.sh ${KINTSUGI_BIN})
add_test(NAME cli.plan_memory COMMAND ${KINTSUGI_BIN} plan --memory)
set_tests_properties(cli.plan_memory PROPERTIES PASS_REGULAR_EXPRESSION
                     "= 18 bytes.*gpt-175b +17[0-9]\\.[0-9]+B .* 3\\.[0-9]+ TB")
add_test(NAME cli.plan_write_config
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_write_config.sh ${KINTSUGI_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/plan-write-config ${TINY}
                 --set data.train=${PROJECT_SOURCE_DIR}/data/brown/train.bin
                 --set data.val=${PROJECT_SOURCE_DIR}/data/brown/val.bin
                 --set data.tokenizer=${PROJECT_SOURCE_DIR}/data/gpt2-tokenizer
                 --set model.n_layer=2 --set model.seq_len=32 --set train.global_batch=4
                 --set train.eval_every=0 --set train.eval_batches=1)
set_tests_properties(cli.plan_write_config PROPERTIES FIXTURES_REQUIRED local_links)
# A preset's plan written as the run it describes, its data left to set (docs/planner.md, "The
# run config plan writes").
add_test(NAME cli.plan_write_config_preset
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_write_config_preset.sh ${KINTSUGI_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/plan-write-config-preset)
# Every bad value of plan's flags refused by name (tests/cli/plan_refuses_bad_values.sh).
add_test(NAME cli.error.plan_bad_values
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_refuses_bad_values.sh ${KINTSUGI_BIN}
                 ${EXPECT_ERROR})
set_tests_properties(cli.error.plan_bad_values PROPERTIES
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
# The table for people: 100 columns, rounded, ties merged, no 1xNx1 grid; --wide for the rest.
add_test(NAME cli.plan_table_readable
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_table_readable.sh ${KINTSUGI_BIN})
# A grid's batch ramp-up (the rule book asked about the grid, not 1D tp over its 8 ranks).
add_test(NAME cli.plan_rampup_of_a_grid
         COMMAND ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --global-batch 512
                 --tensor-grid 2,2,2 --rampup-tokens 4e9 --top 1)
set_tests_properties(cli.plan_rampup_of_a_grid PROPERTIES PASS_REGULAR_EXPRESSION
                     "1 tp 8 grid 2x2x2 .*batch ramp-up for #1: train.batch_rampup = \\[")
add_test(NAME cli.cluster_presets_compiled_in
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/cluster_presets.sh ${KINTSUGI_BIN}
                 ${PROJECT_SOURCE_DIR})
add_test(NAME cli.error.bad_cluster
         COMMAND ${EXPECT_ERROR} "missing key `intra_node.bandwidth_gbs`"
                 ${KINTSUGI_BIN} plan --model gpt-tiny
                 --cluster ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bad-cluster.toml)
add_test(NAME cli.error.plan_does_not_fit
         COMMAND ${EXPECT_ERROR} "no layout fits in 80 GB per device"
                 ${KINTSUGI_BIN} plan --model gpt-1t --cluster dgx-a100-80gb --nodes 1
                 --global-batch 8 --seq 2048)
add_test(NAME cli.error.bench_comm_one_rank
         COMMAND ${EXPECT_ERROR} "run it as `mpirun -np 2 kintsugi bench comm`"
                 ${KINTSUGI_BIN} bench comm)
# plan's --nodes and --global-batch take lists and ranges (docs/planner.md, "Searching a
# campaign"); a bad item is refused in one line naming the option. --ranks and --seq stay single.
add_test(NAME cli.plan_lists_of_nodes_and_batches
         COMMAND ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --nodes 1,2
                 --global-batch 256:512:x2 --objective time --top 3)
set_tests_properties(cli.plan_lists_of_nodes_and_batches PROPERTIES PASS_REGULAR_EXPRESSION
                     "on 1,2 nodes of 8 devices .*global batch 256,512 .*\\(4 searches\\), ranked by time.*nodes +GBS +layout.*Pareto front")
add_test(NAME cli.error.plan_nodes_range
         COMMAND ${EXPECT_ERROR} "--nodes 8:4: the range ends before it starts"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --nodes 8:4)
add_test(NAME cli.error.plan_nodes_not_a_count
         COMMAND ${EXPECT_ERROR} "--nodes 0: 0 is below the least value, 1"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --nodes 0)
# 0 is not a global batch or sequence length (it used to mean the default, silently).
add_test(NAME cli.error.plan_global_batch_zero
         COMMAND ${EXPECT_ERROR} "--global-batch 0: 0 is below the least value, 1"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --global-batch 0)
add_test(NAME cli.error.plan_seq_zero
         COMMAND ${EXPECT_ERROR} "--seq 0 is not a whole number of at least 1"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --seq 0)
add_test(NAME cli.error.plan_global_batch_not_a_number
         COMMAND ${EXPECT_ERROR} "--global-batch x: `x` is not a whole number"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --global-batch 256,x)
add_test(NAME cli.error.plan_seq_list
         COMMAND ${EXPECT_ERROR} "--seq takes one value, not a list \\(1024,2048\\)"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --seq 1024,2048)
add_test(NAME cli.error.plan_tensor_grid_not_three_numbers
         COMMAND ${EXPECT_ERROR} "--tensor-grid 2,2: parallel.tensor_grid must be three whole numbers"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --tensor-grid none 2,2)
add_test(NAME cli.error.plan_max_global_batch
         COMMAND ${EXPECT_ERROR} "no global batch \\(--global-batch 256,512\\) is within --max-global-batch 128"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --global-batch 256,512
                 --max-global-batch 128)
# A token budget: days, hours and energy per layout, and the assumptions printed.
add_test(NAME cli.plan_campaign
         COMMAND ${KINTSUGI_BIN} plan --model gpt-175b --cluster frontier --nodes 8
                 --global-batch 640 --seq 2048 --precision fp16 --tp 4 --pp 16 --micro-batch 1
                 --schedule 1f1b --recompute full --sequence-parallel=false --tokens-per-param 20)
set_tests_properties(cli.plan_campaign PROPERTIES PASS_REGULAR_EXPRESSION
                     "campaign: 3\\.49[0-9]*e\\+12 tokens \\(20 per parameter\\).*energy: devices x 250 W per device.*idle 45 W.*mem GB +time +energy\n +1 tp .* [0-9,.]+ d +[0-9.]+ GWh\n")
add_test(NAME cli.plan_campaign_energy_unknown
         COMMAND ${KINTSUGI_BIN} plan --model gpt2 --global-batch 64 --tokens 1e9 --top 1
                 --cluster ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/cluster-without-power.toml)
set_tests_properties(cli.plan_campaign_energy_unknown PROPERTIES PASS_REGULAR_EXPRESSION
                     "energy: unknown \\(cluster no-power has no \\[power\\] section\\).* unknown\n")
add_test(NAME cli.error.plan_energy_without_power
         COMMAND ${EXPECT_ERROR} "--objective energy: cluster no-power has no \\[power\\] section"
                 ${KINTSUGI_BIN} plan --model gpt2 --objective energy
                 --cluster ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/cluster-without-power.toml)
# Scaling curves (docs/planner.md, "Frontier: strong scaling"): a row per node count and an SVG.
add_test(NAME cli.plan_scaling
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_scaling.sh ${KINTSUGI_BIN}
                 ${CMAKE_CURRENT_BINARY_DIR}/plan-scaling)
add_test(NAME cli.error.plan_scaling_one_count
         COMMAND ${EXPECT_ERROR} "--scaling needs at least two node counts"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster dgx-h100 --scaling strong --nodes 4)
# --ranks on a spec file (tune's refit of the local cluster, a preset): its own devices per node
# are accepted, another count is refused with the ways on.
add_test(NAME cli.error.plan_ranks_not_the_specs
         COMMAND ${EXPECT_ERROR} "--ranks 4: cluster gaudi2 has 8 devices per node"
                 ${KINTSUGI_BIN} plan --model gpt-tiny --cluster gaudi2 --ranks 4)
add_test(NAME cli.plan_ranks_of_the_spec
         COMMAND ${KINTSUGI_BIN} plan --model gpt-tiny --cluster gaudi2 --ranks 8 --top 1)
set_tests_properties(cli.plan_ranks_of_the_spec PROPERTIES
                     PASS_REGULAR_EXPRESSION "1 x 8 = 8 devices of gaudi2")

# --device cuda: without the CUDA backend built, a clear error naming the option that adds it;
# with it but without a GPU, the context's "no CUDA device is visible".
if(KINTSUGI_CUDA)
  set(no_cuda_message "no CUDA device is visible")
else()
  set(no_cuda_message "built without CUDA: rebuild with scripts/build.sh -DKINTSUGI_CUDA=ON")
endif()
add_test(NAME cli.error.device_cuda
         COMMAND ${EXPECT_ERROR} "${no_cuda_message}"
                 ${KINTSUGI_BIN} bench step --device cuda --model gpt2 --steps 1)
add_test(NAME cli.error.train_device_cuda
         COMMAND ${EXPECT_ERROR} "${no_cuda_message}"
                 ${KINTSUGI_BIN} train --config ${TINY} --device cuda
                 --out ${CMAKE_BINARY_DIR}/runs/cli-device-cuda
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})

# The local cluster of a GPU (plan and tune --device cuda, docs/planner.md): refused in one line
# by a build or machine without one, before anything is measured or launched; --device only
# picks the local cluster's devices, and --device cpu is the local cluster as without it.
add_test(NAME cli.error.plan_device_cuda
         COMMAND ${EXPECT_ERROR} "${no_cuda_message}"
                 ${KINTSUGI_BIN} plan --model gpt2 --cluster local --device cuda)
add_test(NAME cli.error.tune_device_cuda
         COMMAND ${EXPECT_ERROR} "${no_cuda_message}"
                 ${KINTSUGI_BIN} tune --config ${TINY} --device cuda
                 --out ${CMAKE_BINARY_DIR}/runs/cli-tune-device-cuda)
add_test(NAME cli.error.tune_config_device_cuda
         COMMAND ${EXPECT_ERROR} "${no_cuda_message}"
                 ${KINTSUGI_BIN} tune --config ${TINY} --set train.device=\"cuda\"
                 --out ${CMAKE_BINARY_DIR}/runs/cli-tune-device-cuda)
add_test(NAME cli.error.plan_device_not_local
         COMMAND ${EXPECT_ERROR} "--device picks the local cluster's devices; --cluster gaudi2"
                 ${KINTSUGI_BIN} plan --model gpt-tiny --cluster gaudi2 --device cuda)
add_test(NAME cli.plan_device_cpu_is_local
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/plan_device_cpu.sh ${KINTSUGI_BIN} ${TINY})
set_tests_properties(cli.plan_device_cpu_is_local PROPERTIES FIXTURES_REQUIRED local_links)

# A run given by flags alone: no --config, every key from --set or its default; the output goes
# to runs/<model.preset>.
add_test(NAME cli.train_without_config
         COMMAND bash -c "rm -rf runs/gpt-tiny && \"$0\" train --set model.preset=gpt-tiny \
--set data.train=$1/data/brown/train.bin --set data.val=$1/data/brown/val.bin \
--set data.tokenizer=$1/data/gpt2-tokenizer --set train.steps=2 --set train.eval_every=0 \
--set train.global_batch=2 --set train.micro_batch=1 --set train.save_checkpoint=false \
&& test -s runs/gpt-tiny/metrics.jsonl && echo made runs/gpt-tiny"
                 ${KINTSUGI_BIN} ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.train_without_config PROPERTIES
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}
                     PASS_REGULAR_EXPRESSION "made runs/gpt-tiny" TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1")

# The environment switches (core/switches.hpp): listed with their values, a value one does not
# take refused in one line before any work, and every switch's value recorded in run.json and in
# bench step's JSON (a set one as set, the others at their defaults).
add_test(NAME cli.help_switches COMMAND ${KINTSUGI_BIN} --help-switches)
set_tests_properties(cli.help_switches PROPERTIES ENVIRONMENT "KINTSUGI_MULTI_TENSOR=0"
                     PASS_REGULAR_EXPRESSION "KINTSUGI_MULTI_TENSOR = 0 \\(set\\)  \\(flag, default 1")
add_test(NAME cli.error.switch_value_refused
         COMMAND ${EXPECT_ERROR} "^kintsugi: error: KINTSUGI_FUSED_LOSS=yes: not a value it takes \\(0 or 1\\)$"
                 ${KINTSUGI_BIN} train --config ${TINY})
set_tests_properties(cli.error.switch_value_refused PROPERTIES
                     ENVIRONMENT "KINTSUGI_FUSED_LOSS=yes")
add_test(NAME cli.switches_recorded
         COMMAND bash -c "set -e; rm -rf switches-run; \"$0\" train --config $1/configs/gpt-tiny.toml \
--set data.train=$1/data/brown/train.bin --set data.val=$1/data/brown/val.bin \
--set data.tokenizer=$1/data/gpt2-tokenizer --set train.steps=1 --set train.eval_every=0 \
--set train.global_batch=2 --set train.micro_batch=1 --set train.save_checkpoint=false \
--out switches-run >/dev/null; \"$0\" bench step --model gpt-tiny --batch 1 --seq 16 --steps 1 \
--warmup 0 --json >switches-bench.json; python3 -c \"
import json, sys
for j in (json.load(open('switches-run/run.json')), json.load(open('switches-bench.json'))):
    s = j['switches']
    assert s['KINTSUGI_MULTI_TENSOR'] == '0' and s['KINTSUGI_FUSED_LOSS'] == '1', s
    assert s['KINTSUGI_TEST_KILL_RANK'] == '', s
print('switches recorded')\""
                 ${KINTSUGI_BIN} ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.switches_recorded PROPERTIES
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1;KINTSUGI_MULTI_TENSOR=0"
                     PASS_REGULAR_EXPRESSION "switches recorded")

# What a save cut short leaves (a ".partial" directory: a second Ctrl-C, a kill) is removed,
# with a note, by the run that resumes; the newest complete checkpoint is the one resumed.
add_test(NAME cli.resume_removes_interrupted_save
         COMMAND bash -c "set -e; out=resume-partial; common=\"--config $1/configs/gpt-tiny.toml \
--set data.train=$1/data/brown/train.bin --set data.val=$1/data/brown/val.bin \
--set data.tokenizer=$1/data/gpt2-tokenizer --set model.d_model=64 --set model.seq_len=32 \
--set train.global_batch=2 --set train.micro_batch=1 --set train.eval_every=0 \
--set train.save_every=2 --set train.save_checkpoint=false --out $out\"; \
\"$0\" train $common --set train.steps=2 --overwrite >/dev/null; \
mkdir -p $out/checkpoints/step-00000004.partial/rank-0; \
\"$0\" train $common --set train.steps=3 --resume auto | tee $out.log; \
test ! -e $out/checkpoints/step-00000004.partial && grep -q 'resuming\\|step 3' $out.log \
&& echo partial gone"
                 ${KINTSUGI_BIN} ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.resume_removes_interrupted_save PROPERTIES
                     WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR} TIMEOUT 120
                     ENVIRONMENT "OMP_NUM_THREADS=1"
                     PASS_REGULAR_EXPRESSION "removed .*step-00000004.partial: a checkpoint save that was interrupted.*partial gone")
