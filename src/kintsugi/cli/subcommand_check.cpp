#include "kintsugi/cli/subcommand_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "kintsugi/core/error.hpp"

namespace kintsugi::cli {
namespace {

std::vector<std::string> names_of(const CLI::App& level) {
  std::vector<std::string> names;
  for (const CLI::App* sub : level.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// "kintsugi" or "kintsugi data".
std::string command_of(const std::vector<std::string>& path) {
  return fmt::format("{}", fmt::join(path, " "));
}

}  // namespace

void check_subcommands(const CLI::App& app, int argc, const char* const* argv) {
  const CLI::App* level = &app;
  std::vector<std::string> path = {"kintsugi"};
  for (int i = 1;; ++i) {
    // Only levels that require a subcommand (kintsugi, kintsugi data, kintsugi bench) have
    // words to check; below them the subcommand's own options and positionals begin.
    if (level->get_require_subcommand_min() == 0) return;
    const std::vector<std::string> names = names_of(*level);
    if (i >= argc)
      fail("{} needs a subcommand: {} (`{} --help` describes them)", command_of(path),
           fmt::join(names, ", "), command_of(path));
    const std::string word = argv[i];
    if (word == "-h" || word == "--help" || word == "--help-all" || word == "--version" ||
        (level == &app && word == "--help-switches"))
      return;
    if (word.starts_with("-"))
      fail("{} {}: an option needs a subcommand before it, one of {} (`{} --help` describes "
           "them)",
           command_of(path), word, fmt::join(names, ", "), command_of(path));
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : level->get_subcommands([](const CLI::App*) { return true; }))
      if (sub->check_name(word)) next = sub;
    if (!next)
      fail("unknown subcommand \"{}\" of {}: the subcommands are {} (`{} --help` describes them)",
           word, command_of(path), fmt::join(names, ", "), command_of(path));
    level = next;
    path.push_back(word);
  }
}

}  // namespace kintsugi::cli
