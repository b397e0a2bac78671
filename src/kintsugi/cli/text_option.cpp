#include "kintsugi/cli/text_option.hpp"

#include "kintsugi/core/error.hpp"

namespace kintsugi::cli {

CLI::Option* add_text_option(CLI::App& command, const std::string& names, std::string& target,
                             const std::string& help) {
  const std::string name = names.substr(0, names.find(','));
  return command
      .add_option_function<std::string>(
          names,
          [&target, name](const std::string& value) {
            if (value.empty())
              fail("{} '' is empty: give it a value, or drop {} for its default", name, name);
            target = value;
          },
          help)
      ->type_name("TEXT");
}

}  // namespace kintsugi::cli
