#include "commands.h"

#include <algorithm>

namespace torchmt::cli {
namespace {

std::vector<Command>& registry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace

CommandRegistration::CommandRegistration(Command command) { registry().push_back(std::move(command)); }

std::vector<Command> all_commands() {
  auto commands = registry();
  std::sort(commands.begin(), commands.end(), [](const Command& a, const Command& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return commands;
}

}  // namespace torchmt::cli
