#include "torchmt/util/flat_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "util/atomic_file.h"
#include "util/integrity.h"
#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

// Only YAML's printable characters, in the text and in what its escapes produce (JSON's
// "\u0000" included): yaml-cpp reads a NUL as the end of a key and invents bytes after it, and
// writes U+FFFF back as U+FFFD; a NUL in a path would cut it. On valid UTF-8 the others are byte
// patterns: C0 controls but tab/LF/CR, DEL, C1 controls but NEL (C2 80..9F), U+FFFE and U+FFFF
// (EF BF BE/BF). `where` names the key for a parsed value ("" for the text itself).
void check_printable(std::string_view text, const std::string& where) {
  if (!where.empty() && !is_valid_utf8(text))  // a "\uD800" escape: a lone surrogate
    throw std::runtime_error("not valid UTF-8 in " + where);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0; };
    size_t bad = 0;
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7F) bad = 1;
    else if (c == 0xC2 && next(1) >= 0x80 && next(1) <= 0x9F && next(1) != 0x85) bad = 2;
    else if (c == 0xEF && next(1) == 0xBF && (next(2) == 0xBE || next(2) == 0xBF)) bad = 3;
    if (bad) {
      char code[16];
      std::snprintf(code, sizeof(code), "U+%04X", static_cast<unsigned>((*decode_utf8(text.substr(i, bad)))[0]));
      throw std::runtime_error(std::string("character ") + code + " (not printable) " +
                               (where.empty() ? "at byte " + std::to_string(i) : "in " + where));
    }
  }
}

// Every key and value of a parsed config: printable, as its text had to be.
void check_printable(const FlatConfig& config) {
  for (const auto& key : config.keys()) {
    check_printable(key, "a key");
    for (const auto& value : config.get_list(key)) check_printable(value, "the value of '" + escape_control(key) + "'");
  }
}

bool starts_as_json_object(const std::string& text) {
  size_t i = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // UTF-8 byte-order mark
  i = text.find_first_not_of(" \t\r\n", i);
  return i != std::string::npos && text[i] == '{';
}

FlatConfig parse_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number beyond a double (out_of_range)
    std::string what = e.what();
    throw std::runtime_error("malformed JSON: " + what.substr(what.find(']') + 2));
  }
  if (!j.is_object()) throw std::runtime_error("expected a JSON object of key: value pairs");
  FlatConfig out;
  auto scalar = [](const std::string& key, const nlohmann::json& value) -> std::string {
    if (value.is_string()) return value.get<std::string>();
    if (value.is_null()) return "";
    if (value.is_primitive()) return value.dump();  // numbers and booleans as written
    throw std::runtime_error("key '" + escape_control(key) + "' holds a nested structure (only key: value pairs and lists)");
  };
  for (const auto& [key, value] : j.items()) {
    if (value.is_array()) {
      std::vector<std::string> list;
      for (const auto& item : value) list.push_back(scalar(key, item));
      out.set_list(key, list);
    } else {
      out.set(key, scalar(key, value));
    }
  }
  return out;
}

FlatConfig parse_yaml(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("malformed YAML at line " + std::to_string(e.mark.line + 1) + ", column " +
                             std::to_string(e.mark.column + 1) + ": " + escape_control(e.msg));
  }
  FlatConfig out;
  if (root.IsNull()) return out;  // empty file or only comments
  if (!root.IsMap()) throw std::runtime_error("expected a YAML mapping of key: value lines");
  for (const auto& item : root) {
    if (!item.first.IsScalar())  // `: x` (a null key) or a mapping/list used as a key
      throw std::runtime_error("line " + std::to_string(item.first.Mark().line + 1) + ": a key must be a name");
    const std::string key = item.first.Scalar();
    if (out.has(key)) throw std::runtime_error("key '" + escape_control(key) + "' appears twice");
    const YAML::Node& value = item.second;
    auto scalar = [&key](const YAML::Node& node) -> std::string {
      if (node.IsNull()) return "";
      if (node.IsScalar()) return node.Scalar();
      throw std::runtime_error("key '" + escape_control(key) + "' holds a nested structure (only key: value lines and lists)");
    };
    if (value.IsSequence()) {
      std::vector<std::string> list;
      for (const auto& element : value) list.push_back(scalar(element));
      out.set_list(key, list);
    } else {
      out.set(key, scalar(value));
    }
  }
  return out;
}

// Text that reads back as a JSON number or boolean is written bare, everything else as a string.
enum class Kind { kBool, kInt, kFloat, kText };
Kind kind_of(const std::string& v) {
  if (v == "true" || v == "false") return Kind::kBool;
  if (v.empty() || v.find_first_not_of("-0123456789.eE") != std::string::npos) return Kind::kText;  // no inf/nan/hex
  if (!std::isdigit(static_cast<unsigned char>(v.back())) || v[0] == '.' || v[0] == 'e' || v[0] == 'E')
    return Kind::kText;
  const size_t digits_from = v[0] == '-' ? 1 : 0;
  if (v.size() > digits_from + 1 && v[digits_from] == '0' && std::isdigit(static_cast<unsigned char>(v[digits_from + 1])))
    return Kind::kText;  // "007" is text in JSON
  char* end = nullptr;
  errno = 0;
  std::strtoll(v.c_str(), &end, 10);
  if (*end == '\0' && errno == 0) return Kind::kInt;
  errno = 0;
  std::strtod(v.c_str(), &end);
  // Out of double's range ("1e999" would be written as JSON null): text.
  return *end == '\0' && errno == 0 ? Kind::kFloat : Kind::kText;
}

}  // namespace

FlatConfig FlatConfig::parse(const std::string& text) {
  // Both readers would take invalid UTF-8 in places (yaml-cpp as is, JSON output replaced):
  // a config is text, and a damaged one is refused where the damage is.
  if (auto bad = find_invalid_utf8(text)) throw std::runtime_error("not valid UTF-8 (byte " + std::to_string(*bad) + ")");
  check_printable(text, "");
  FlatConfig config = starts_as_json_object(text) ? parse_json(text) : parse_yaml(text);
  check_printable(config);
  return config;
}

FlatConfig FlatConfig::load(const std::string& path, Seal* seal) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception&) {
    throw std::runtime_error("cannot open config file: " + path);
  }
  text = verify_text_seal(text, "config file", path, seal);
  try {
    return parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

const std::string& FlatConfig::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    if (lists_.count(key)) throw std::runtime_error("config key " + escape_control(key) + " holds a list, expected one value");
    throw std::runtime_error("missing config key: " + escape_control(key));
  }
  return it->second;
}

std::vector<std::string> FlatConfig::get_list(const std::string& key) const {
  auto it = lists_.find(key);
  if (it != lists_.end()) return it->second;
  return {get(key)};
}

void FlatConfig::merge(const FlatConfig& over) {
  for (const auto& [k, v] : over.values_) set(k, v);
  for (const auto& [k, v] : over.lists_) set_list(k, v);
}

std::vector<std::string> FlatConfig::keys() const {
  std::vector<std::string> out;
  for (const auto& kv : values_) out.push_back(kv.first);
  for (const auto& kv : lists_) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

std::string FlatConfig::get_or(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

namespace {

// The whole of `text` as a number via `parse` (std::stoll / std::stod), or a one-line error.
template <typename T, typename Parse>
T whole_number(const std::string& key, const std::string& text, Parse parse, const char* what) {
  try {
    size_t used = 0;
    T x = parse(text, &used);
    if (used == text.size()) return x;
  } catch (const std::exception&) {
  }
  throw std::runtime_error("config key " + escape_control(key) + " is not " + what + ": '" + escape_control(text) + "'");
}

}  // namespace

int64_t FlatConfig::get_int(const std::string& key) const {
  return whole_number<int64_t>(key, get(key), [](const std::string& t, size_t* n) { return std::stoll(t, n); },
                               "an integer");
}

double FlatConfig::get_double(const std::string& key) const {
  return whole_number<double>(key, get(key), [](const std::string& t, size_t* n) { return std::stod(t, n); },
                              "a number");
}

bool FlatConfig::get_bool(const std::string& key) const {
  const std::string& v = get(key);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  throw std::runtime_error("config key " + escape_control(key) + " is not a boolean: '" + escape_control(v) + "'");
}

std::string FlatConfig::to_json() const {
  auto scalar = [](const std::string& v) -> nlohmann::ordered_json {
    switch (kind_of(v)) {
      case Kind::kBool: return v == "true";
      case Kind::kInt: return std::stoll(v);
      case Kind::kFloat: return std::stod(v);
      case Kind::kText: break;
    }
    return v;
  };
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const auto& k : keys()) {
    auto list = lists_.find(k);
    if (list == lists_.end()) {
      j[k] = scalar(values_.at(k));
      continue;
    }
    j[k] = nlohmann::ordered_json::array();
    for (const auto& v : list->second) j[k].push_back(scalar(v));
  }
  // UTF-8 stays UTF-8; an invalid byte becomes U+FFFD rather than an exception.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string FlatConfig::to_yaml() const {
  YAML::Emitter out;
  out << YAML::BeginMap;
  // yaml-cpp quotes what its reader would not read back as the same text; an empty value is
  // written "" so that it stays an (empty) string.
  // Its plain style misses control characters (a value ending in "\r\r" read back without
  // them): those are written double-quoted, with escapes.
  auto scalar = [&out](const std::string& v) {
    const bool control = std::any_of(v.begin(), v.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || c == 0x7F;
    });
    if (v.empty() || control) out << YAML::DoubleQuoted << v;
    else out << v;
  };
  for (const auto& k : keys()) {
    // YAML limits a simple key to 1024 characters as written (escapes at most double a key's
    // bytes); a longer one is written "? key".
    if (k.size() > 500) out << YAML::LongKey;
    out << YAML::Key;
    scalar(k);
    out << YAML::Value;
    auto list = lists_.find(k);
    if (list == lists_.end()) {
      scalar(values_.at(k));
      continue;
    }
    out << YAML::BeginSeq;
    for (const auto& v : list->second) scalar(v);
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace torchmt
