#include "commands.h"

namespace torchmt::cli {

int run_info(int argc, char** argv);

const std::vector<Command>& all_commands() {
  static const std::vector<Command> commands = {
      {"info", "print a model preset's shape and parameter count", run_info},
  };
  return commands;
}

}  // namespace torchmt::cli
