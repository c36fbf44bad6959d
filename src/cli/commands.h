#pragma once
// The subcommands of the `torchmt` binary. Each is a thin shell over torchmt_core:
// parse flags, call the library, map errors to a one-line message and an exit code.
// A command file registers itself with a file-scope `CommandRegistration`, so adding a
// command touches no shared list.
#include <functional>
#include <string>
#include <vector>

namespace torchmt::cli {

// Exit codes: 0 ok, 1 runtime failure (bad input file, ...), 2 usage error (bad flag).
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Command {
  std::string name;
  std::string summary;
  std::function<int(int argc, char** argv)> run;  // argv[0] is "torchmt <name>"
  int order = 100;                                // position in `torchmt --help`
};

// Every registered subcommand, sorted by `order` then name.
std::vector<Command> all_commands();

struct CommandRegistration {
  explicit CommandRegistration(Command command);
};

}  // namespace torchmt::cli
