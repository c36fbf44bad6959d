#include "cli_options.h"

#include "torchmt/decoding/reverse_rescoring.h"
#include "torchmt/decoding/translation_options.h"
#include "torchmt/decoding/translator.h"
#include "evaluation/utf8_line_reader.h"
#include "torchmt/loading/model_loader.h"
#include "util/heap.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace torchmt::cli {
namespace {

std::string flag_help(const OptionRow& row) {
  std::string help = row.help;
  const bool show_default = !row.default_text.empty() && !(row.kind == OptionKind::kBool && row.default_text == "false");
  if (show_default) help += " (default: " + row.default_text + ")";
  return help;
}

std::shared_ptr<cxxopts::Value> flag_value(const OptionRow& row) {
  switch (row.kind) {
    case OptionKind::kBool: return cxxopts::value<bool>()->implicit_value("true");
    case OptionKind::kList: return cxxopts::value<std::vector<std::string>>();
    default: return cxxopts::value<std::string>();
  }
}

// A flag under an earlier name gets a one-line pointer to its new name, not cxxopts'
// "does not exist".
bool refuse_old_flags(const std::vector<OptionRow>& rows, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const auto& row : rows) {
      for (const auto& old : row.old_keys) {
        const std::string old_flag = "--" + flag_name(old);
        if (std::strcmp(argv[i], old_flag.c_str()) == 0 ||
            std::strncmp(argv[i], (old_flag + "=").c_str(), old_flag.size() + 1) == 0) {
          std::cerr << argv[0] << ": " << old_flag << " is now --" << row.flag() << " (see --help)\n";
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

int usage_error(const char* program, const std::string& message) {
  std::cerr << program << ": " << escape_control(message) << " (see --help)\n";
  return kExitUsage;
}

std::vector<NamedPath> translator_inputs(const TranslatorConfig& config, std::vector<NamedPath> more) {
  for (const auto& model : config.models) more.emplace_back("-m/--model", model);
  more.emplace_back("--shortlist", config.shortlist);
  return more;
}

std::optional<CommandLine> parse_command_line(const std::string& description, const std::vector<OptionRow>& rows,
                                              int argc, char** argv, int& exit_code, const std::string& positional) {
  cxxopts::Options options(argv[0], description);
  for (const auto& row : rows) {
    const std::string name = row.short_flag.empty() ? row.flag() : row.short_flag + "," + row.flag();
    options.add_options(row.group)(name, flag_help(row), flag_value(row));
  }
  options.add_options("configuration")("config", "read options from this YAML or JSON file (keys as the flags, "
                                                 "with _ for -); flags given as well override it",
                                       cxxopts::value<std::string>())(
      "dump-config", "print the effective configuration as YAML (usable with --config) and exit")(
      "h,help", "show this help");
  if (!positional.empty()) {
    options.parse_positional({flag_name(positional)});
    std::string shown = positional;
    for (auto& c : shown) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    options.positional_help(shown + "...");
  }
  if (refuse_old_flags(rows, argc, argv)) {
    exit_code = kExitUsage;
    return std::nullopt;
  }
  CommandLine line;
  try {
    line.flags = options.parse(argc, argv);
  } catch (const std::exception& e) {
    exit_code = usage_error(argv[0], e.what());
    return std::nullopt;
  }
  const auto& r = line.flags;
  if (r.count("help")) {
    std::vector<std::string> groups;
    for (const auto& row : rows)
      if (std::find(groups.begin(), groups.end(), row.group) == groups.end()) groups.push_back(row.group);
    groups.push_back("configuration");
    std::cout << options.help(groups) << "\n";
    exit_code = kExitOk;
    return std::nullopt;
  }
  if (!r.unmatched().empty()) {
    // A file given without its flag (as fairseq-interactive or sacreBLEU take them): say which.
    const bool takes_input = std::any_of(rows.begin(), rows.end(), [](const OptionRow& row) { return row.flag() == "input"; });
    std::cerr << argv[0] << ": unexpected argument '" << escape_control(r.unmatched().front()) << "'"
              << (takes_input ? " (an input file goes after -i/--input)" : "") << "\n";
    exit_code = kExitUsage;
    return std::nullopt;
  }
  if (r.count("config")) {
    try {
      line.config = FlatConfig::load(r["config"].as<std::string>());
    } catch (const std::exception& e) {
      std::cerr << argv[0] << ": --config: " << escape_control(e.what()) << "\n";
      exit_code = kExitUsage;
      return std::nullopt;
    }
  }
  for (const auto& row : rows) {
    const std::string flag = row.flag();
    if (!r.count(flag)) continue;
    switch (row.kind) {
      case OptionKind::kBool: line.config.set(row.key, r[flag].as<bool>() ? "true" : "false"); break;
      case OptionKind::kList: line.config.set_list(row.key, r[flag].as<std::vector<std::string>>()); break;
      default: line.config.set(row.key, r[flag].as<std::string>()); break;
    }
  }
  line.dump_config = r.count("dump-config") > 0;
  return line;
}

std::string as_given(const CommandLine& line, const std::string& message) {
  const std::string prefix = "config key ";
  if (message.rfind(prefix, 0) != 0) return message;
  const size_t end = std::min(message.find(' ', prefix.size()), message.size());
  const std::string flag = flag_name(message.substr(prefix.size(), end - prefix.size()));
  if (!line.flags.count(flag)) return message;
  return "--" + flag + message.substr(end);
}

Translator load_cli_translator(TranslatorConfig& config) {
  config.runtime = Runtime::from_environment();
  return load_translator(config);
}

std::unique_ptr<Translator> load_reverse_model(const ReverseRescoring& rescoring, const TranslatorConfig& forward_config) {
  rescoring.validate(forward_config.translation.search);
  if (rescoring.reverse_model.empty()) return nullptr;
  TranslatorConfig config = forward_config;
  config.models = {rescoring.reverse_model};
  config.ensemble_weights.clear();
  config.shortlist.clear();  // a shortlist restricts the forward direction's output
  return std::make_unique<Translator>(load_cli_translator(config));
}

std::unique_ptr<Translator> load_reverse_translator(const ReverseRescoring& rescoring,
                                                    const TranslatorConfig& forward_config, const Translator& forward) {
  std::unique_ptr<Translator> reverse = load_reverse_model(rescoring, forward_config);  // null when off
  if (!rescoring.enabled()) return nullptr;
  const std::string problem = reverse_problem(forward, reverse.get());
  if (!problem.empty())
    throw std::invalid_argument(reverse ? "--reverse-model " + rescoring.reverse_model + " " + problem
                                        : "--reverse-weight: " + problem + ": give --reverse-model");
  return reverse;
}

void use_heap_policy(const TranslationOptions& options) {
  const bool large = options.batch_source_tokens > 0 ? options.batch_source_tokens >= 512 : options.batch_size >= 32;
  if (large) use_one_heap_arena();
}

LanguageIdentifier learn_languages(const std::vector<std::string>& items, const std::vector<std::string>& allowed) {
  LanguageIdentifier identifier;
  std::vector<std::string> codes;
  for (const auto& item : items) {
    const auto eq = item.find('=');
    const std::string code = item.substr(0, eq);
    if (eq == std::string::npos) throw std::invalid_argument("--learn " + item + ": expected CODE=FILE");
    check_language_code(code, "--learn");
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), code) == allowed.end())
      throw std::invalid_argument("--learn " + item + ": the model translates " + allowed.front() + " to " + allowed.back());
    if (std::find(codes.begin(), codes.end(), code) != codes.end())
      throw std::invalid_argument("--learn " + item + ": " + code + " is given twice (one file per language)");
    codes.push_back(code);
    const std::string file = item.substr(eq + 1);
    const auto lines = evaluation::read_utf8_lines(file);
    if (std::all_of(lines.begin(), lines.end(), [](const std::string& l) { return l.find_first_not_of(" \t") == std::string::npos; }))
      throw std::runtime_error("--learn " + item + ": " + file + " has no text to learn " + code + " from");
    identifier.learn(code, lines);
  }
  return identifier;
}

}  // namespace torchmt::cli
