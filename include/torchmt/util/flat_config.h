#pragma once
// A flat key -> scalar map read from and written to JSON objects (nlohmann/json) or YAML
// mappings (yaml-cpp): configuration files, run configs, checkpoint and export metadata.
// Values are kept as text; nested structures are rejected with a clear error.
#include <map>
#include <string>

namespace torchmt {

class FlatConfig {
 public:
  // Parses a JSON object (text starting with `{`) or a YAML mapping (`a: 1` lines, comments
  // with ` #`, quoted or plain scalars, escapes as each format defines them). Throws
  // std::runtime_error with the line/position on malformed input.
  static FlatConfig parse(const std::string& text);
  static FlatConfig load(const std::string& path);

  bool has(const std::string& key) const { return values_.count(key) != 0; }
  const std::string& get(const std::string& key) const;
  std::string get_or(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  void set(const std::string& key, const std::string& value) { values_[key] = value; }
  const std::map<std::string, std::string>& values() const { return values_; }

  // Numbers and booleans are written bare, everything else quoted.
  std::string to_json() const;
  std::string to_yaml() const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace torchmt
