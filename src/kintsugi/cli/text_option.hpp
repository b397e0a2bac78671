#pragma once
// A text option whose empty value is refused. The commands read an empty string as the option
// not given (the default output directory, the config's own schedule, no trace), so `--out ''`
// from a script whose variable is unset would silently do something else than asked.
#include <CLI/CLI.hpp>
#include <string>

namespace kintsugi::cli {

// Adds `names` (e.g. "--config,-c") setting `target`; kintsugi::Error on an empty value, naming
// the option. `target` must outlive the parse.
CLI::Option* add_text_option(CLI::App& command, const std::string& names, std::string& target,
                             const std::string& help);

}  // namespace kintsugi::cli
