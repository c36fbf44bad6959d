#pragma once
// Flag handling shared by the subcommands. Each subcommand has one option table
// (torchmt/util/option_table.h); from it come its flags, its --help text with the defaults,
// `--config FILE` (YAML or JSON, keys as the flags with _ for -; flags override the file)
// and `--dump-config` (the effective configuration as YAML, ready for --config).
// cxxopts errors become one line and exit code 2.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "commands.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/util/option_table.h"
#include "util/atomic_file.h"

namespace torchmt {
class Translator;
struct ReverseRescoring;
struct TranslationOptions;
struct TranslatorConfig;
}

namespace torchmt::cli {

// What a command line says: the parsed flags, and the configuration that --config FILE and
// the flags given give together.
struct CommandLine {
  cxxopts::ParseResult flags;
  FlatConfig config;
  bool dump_config = false;
};

// Makes a flag per row (help text with the default), plus --config, --dump-config and
// --help, parses argv and overlays the flags given on the --config file. On --help prints
// `description` and the options and sets kExitOk; on a bad flag prints one line and sets
// kExitUsage; both return nullopt. `positional`: the key that takes the arguments without a
// flag, if any.
std::optional<CommandLine> parse_command_line(const std::string& description, const std::vector<OptionRow>& rows,
                                              int argc, char** argv, int& exit_code,
                                              const std::string& positional = "");

// The heap policy of a translating command (util/heap.h: process policy, the CLI's to set):
// one C heap arena when batches are large (>= 32 sentences, or >= 512 source tokens), where
// the workers' own arenas held 40-90 MiB more at about the same speed; smaller batches allocate
// at a high rate and wait on one arena's lock (int8 batch 1: 1.27x the time, batch 16: 1.18x).
void use_heap_policy(const TranslationOptions& options);

// load_translator(config) with the CLI's kernel settings: a Runtime from the environment table
// (kernels/runtime.h). Throws as load_translator does (std::invalid_argument: a usage error).
Translator load_cli_translator(TranslatorConfig& config);

// --reverse-model loaded as `forward_config` says (device, dtype, threads; no ensemble weights or
// shortlist), null when not given, after rescoring.validate().
std::unique_ptr<Translator> load_reverse_model(const ReverseRescoring& rescoring, const TranslatorConfig& forward_config);

// The reverse model --reverse-weight asks for: --reverse-model loaded as `forward_config` says
// (device, dtype, threads), or null where `forward` is its own (a --both-directions model).
// Nothing is loaded when rescoring is off. std::invalid_argument (a usage error) for a model
// that cannot be its own reverse, or a reverse model of other languages.
std::unique_ptr<Translator> load_reverse_translator(const ReverseRescoring& rescoring,
                                                    const TranslatorConfig& forward_config, const Translator& forward);

// A language identifier learned from `--learn CODE=FILE` items (detect, languages); `allowed`, when
// not empty, the only codes it may name. std::invalid_argument for a malformed item (a usage
// error), std::runtime_error for a file that cannot be read.
LanguageIdentifier learn_languages(const std::vector<std::string>& items, const std::vector<std::string>& allowed = {});

// Prints "PROGRAM: MESSAGE (see --help)" and returns kExitUsage.
int usage_error(const char* program, const std::string& message);

// The files a translator reads (-m models, --shortlist) as {flag, path}, for same_file_twice
// (util/atomic_file.h), with `more` after them.
std::vector<NamedPath> translator_inputs(const TranslatorConfig& config, std::vector<NamedPath> more = {});

// The options' error for the user: "config key max_len_b ..." names --max-len-b when the value
// came from that flag, not from the --config file.
std::string as_given(const CommandLine& line, const std::string& message);

// The options `line` gives (`start` for the keys it does not name). A bad value is a usage
// error (one line, kExitUsage); with --dump-config prints the effective configuration and
// sets kExitOk. Both return nullopt.
template <typename Options>
std::optional<Options> read_options(const OptionTable<Options>& table, const CommandLine& line, const char* program,
                                    int& exit_code, Options start = Options{}) {
  Options options;
  try {
    options = table.read(line.config, std::move(start));
  } catch (const std::invalid_argument& e) {
    exit_code = usage_error(program, as_given(line, e.what()));
    return std::nullopt;
  }
  if (line.dump_config) {
    std::cout << table.write(options).to_yaml();
    exit_code = kExitOk;
    return std::nullopt;
  }
  return options;
}

// parse_command_line + read_options.
template <typename Options>
std::optional<Options> parse_options(const OptionTable<Options>& table, const std::string& description, int argc,
                                     char** argv, int& exit_code, const std::string& positional = "") {
  auto line = parse_command_line(description, table.rows(), argc, argv, exit_code, positional);
  if (!line) return std::nullopt;
  return read_options(table, *line, argv[0], exit_code);
}

// Runs `check` (which throws std::invalid_argument naming the flag); false after printing
// the one-line usage error.
template <typename Check>
bool check_usage(Check check, const char* program) {
  try {
    check();
    return true;
  } catch (const std::invalid_argument& e) {
    usage_error(program, e.what());
    return false;
  }
}

}  // namespace torchmt::cli
