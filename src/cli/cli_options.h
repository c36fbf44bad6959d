#pragma once
// Shared flag handling for subcommands: cxxopts errors become one line + exit code 2.
#include <iostream>
#include <optional>
#include <string>

#include <cxxopts.hpp>

#include "commands.h"

namespace torchmt::cli {

// Parses argv; on --help prints the help and returns kExitOk in `exit_code`; on a bad flag
// prints one line and returns kExitUsage. Otherwise returns the parse result.
inline std::optional<cxxopts::ParseResult> parse_flags(cxxopts::Options& options, int argc, char** argv,
                                                        int& exit_code) {
  options.add_options()("h,help", "show this help");
  try {
    auto result = options.parse(argc, argv);
    if (result.count("help")) {
      std::cout << options.help() << "\n";
      exit_code = kExitOk;
      return std::nullopt;
    }
    if (!result.unmatched().empty()) {
      std::cerr << argv[0] << ": unexpected argument '" << result.unmatched().front() << "'\n";
      exit_code = kExitUsage;
      return std::nullopt;
    }
    return result;
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << " (see --help)\n";
    exit_code = kExitUsage;
    return std::nullopt;
  }
}

// A required string flag: one-line usage error when missing.
inline bool require_flag(const cxxopts::ParseResult& r, const std::string& name, const char* program) {
  if (r.count(name)) return true;
  std::cerr << program << ": missing required option --" << name << " (see --help)\n";
  return false;
}

}  // namespace torchmt::cli
