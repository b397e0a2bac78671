#pragma once
// Each subcommand of `kintsugi` lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

namespace kintsugi::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_encode_command(CLI::App& app);
void add_decode_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_layout_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_import_command(CLI::App& app);

}  // namespace kintsugi::cli
