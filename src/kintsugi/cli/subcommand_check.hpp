#pragma once
// Names an unknown or missing subcommand in one line, before CLI11 parses the command line
// (CLI11 answers both with "A subcommand is required", which does not say what was wrong).
#include <CLI/CLI.hpp>

namespace kintsugi::cli {

// Walks argv down the subcommand tree while each level requires a subcommand; throws
// kintsugi::Error on a word that is not one of the level's subcommands, an option given
// before any subcommand (other than --help and --version) or a missing subcommand, listing
// the level's subcommands.
void check_subcommands(const CLI::App& app, int argc, const char* const* argv);

}  // namespace kintsugi::cli
