// `kintsugi <subcommand>`: parses the command line and turns every user-facing error into one
// clear line on stderr and a non-zero exit.
#include <fmt/format.h>

#include <cstdio>

#include "kintsugi/cli/commands.hpp"
#include "kintsugi/cli/subcommand_check.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/switches.hpp"
#include "kintsugi/core/threads.hpp"

int main(int argc, char** argv) {
  kintsugi::bound_openmp_spinning(argv);
  // Line-buffered even into a file or pipe (the log of a batch job): a crash or a kill loses no
  // line that was printed. std::cout writes through stdout (synchronized with stdio).
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  CLI::App app{"kintsugi: train GPT-, Llama- and BLOOM-style language models with 3D parallelism"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kintsugi 0.1.0");
  // Every option's --help shows its default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.add_flag_callback(
      "--help-switches",
      [] {
        fmt::print("{}", kintsugi::Switches::process().describe());
        throw CLI::Success();
      },
      "List every environment switch (KINTSUGI_*: docs/switches.md) with its value, default "
      "and what it does, and exit");
  using namespace kintsugi::cli;
  add_train_command(app);
  add_eval_command(app);
  add_generate_command(app);
  add_encode_command(app);
  add_decode_command(app);
  add_data_command(app);
  add_bench_command(app);
  add_layout_command(app);
  add_plan_command(app);
  add_tune_command(app);
  add_export_command(app);
  add_import_command(app);
  try {
    // The environment switches, read and checked before anything else: a value one does not
    // take ends the program here, in one line (core/switches.hpp).
    kintsugi::Switches::process();
    check_subcommands(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kintsugi::Error& e) {
    fmt::print(stderr, "kintsugi: error: {}\n", e.what());
    return 1;
  } catch (const kintsugi::AlreadyReported& done) {
    return done.exit_code;
  }
  return 0;
}
