#pragma once
// A flat key -> value map read from and written to JSON objects (nlohmann/json) or YAML
// mappings (yaml-cpp): configuration files, run configs, checkpoint and export metadata.
// A value is a scalar kept as text, or a list of scalars (a YAML sequence / JSON array);
// deeper structures are rejected with a clear error.
#include <map>
#include <string>
#include <vector>

namespace torchmt {

enum class Seal;  // util/integrity.h

class FlatConfig {
 public:
  // Parses a JSON object (text starting with `{`) or a YAML mapping (`a: 1` lines, comments
  // with ` #`, quoted or plain scalars, escapes as each format defines them). Throws
  // std::runtime_error with the line/position on malformed input.
  static FlatConfig parse(const std::string& text);
  // A file that ends with a checksum line (a run's config.yaml, util/integrity.h) is verified
  // first; `seal` says whether it had one.
  static FlatConfig load(const std::string& path, Seal* seal = nullptr);

  bool has(const std::string& key) const { return values_.count(key) != 0 || lists_.count(key) != 0; }
  const std::string& get(const std::string& key) const;  // throws when missing or a list
  std::string get_or(const std::string& key, const std::string& fallback) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  // The list under `key`; a scalar reads as a list of one.
  std::vector<std::string> get_list(const std::string& key) const;
  void set(const std::string& key, const std::string& value) {
    lists_.erase(key);
    values_[key] = value;
  }
  void set_list(const std::string& key, const std::vector<std::string>& values) {
    values_.erase(key);
    lists_[key] = values;
  }
  // Every key of `over` replaces the same key here.
  void merge(const FlatConfig& over);
  std::vector<std::string> keys() const;  // sorted
  const std::map<std::string, std::string>& values() const { return values_; }  // the scalars

  // Numbers and booleans are written bare, everything else quoted.
  std::string to_json() const;
  std::string to_yaml() const;

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
};

}  // namespace torchmt
