#include "torchmt/util/flat_json.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace torchmt {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool looks_bare(const std::string& v) {
  if (v == "true" || v == "false") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  return end && *end == '\0' && !std::isspace(static_cast<unsigned char>(v[0]));
}

std::string quote(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default: out += c;
    }
  }
  return out + "\"";
}

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  std::map<std::string, std::string> read_object() {
    std::map<std::string, std::string> out;
    expect('{');
    skip_ws();
    if (peek() == '}') { ++i_; return out; }
    while (true) {
      skip_ws();
      std::string key = read_string();
      expect(':');
      skip_ws();
      out[key] = read_scalar();
      skip_ws();
      if (peek() == ',') { ++i_; continue; }
      expect('}');
      break;
    }
    skip_ws();
    if (i_ != s_.size()) fail("trailing characters after the object");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(i_) + ": " + what);
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() { while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_; }
  void expect(char c) {
    skip_ws();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string read_string() {
    if (peek() != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c == '\\') {
        if (i_ >= s_.size()) fail("unterminated escape");
        char e = s_[i_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '/': out += '/'; break;
          case '\\': out += '\\'; break;
          case '"': out += '"'; break;
          default: fail(std::string("unsupported escape \\") + e);
        }
      } else {
        out += c;
      }
    }
    if (peek() != '"') fail("unterminated string");
    ++i_;
    return out;
  }
  std::string read_scalar() {
    if (peek() == '"') return read_string();
    if (peek() == '{' || peek() == '[') fail("nested values are not supported");
    size_t start = i_;
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && !std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    std::string v = s_.substr(start, i_ - start);
    if (v.empty()) fail("expected a value");
    if (v == "null") return "";
    if (!looks_bare(v)) fail("not a number, string or boolean: " + v);
    return v;
  }
  const std::string& s_;
  size_t i_ = 0;
};

}  // namespace

FlatConfig FlatConfig::parse(const std::string& text) {
  FlatConfig cfg;
  std::string t = trim(text);
  if (!t.empty() && t[0] == '{') {
    cfg.values_ = JsonReader(t).read_object();
    return cfg;
  }
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string l = line;
    // Strip a comment that is not inside quotes.
    bool in_quote = false;
    for (size_t i = 0; i < l.size(); ++i) {
      if (l[i] == '"' || l[i] == '\'') in_quote = !in_quote;
      if (l[i] == '#' && !in_quote) { l = l.substr(0, i); break; }
    }
    l = trim(l);
    if (l.empty() || l == "---") continue;
    size_t colon = l.find(':');
    if (colon == std::string::npos)
      throw std::runtime_error("invalid config line " + std::to_string(lineno) + ": expected 'key: value'");
    std::string key = trim(l.substr(0, colon));
    std::string value = trim(l.substr(colon + 1));
    if (key.empty()) throw std::runtime_error("invalid config line " + std::to_string(lineno) + ": empty key");
    if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
      value = value.substr(1, value.size() - 2);
    if (value == "null" || value == "~") value.clear();
    cfg.values_[key] = value;
  }
  return cfg;
}

FlatConfig FlatConfig::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open config file: " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return parse(ss.str());
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

const std::string& FlatConfig::get(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::runtime_error("missing config key: " + key);
  return it->second;
}

std::string FlatConfig::get_or(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

int64_t FlatConfig::get_int(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw std::runtime_error("config key " + key + " is not an integer: '" + v + "'");
  }
}

double FlatConfig::get_double(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    throw std::runtime_error("config key " + key + " is not a number: '" + v + "'");
  }
}

bool FlatConfig::get_bool(const std::string& key) const {
  const std::string& v = get(key);
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  throw std::runtime_error("config key " + key + " is not a boolean: '" + v + "'");
}

std::string FlatConfig::to_json() const {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : values_) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += quote(k) + ": " + (looks_bare(v) ? v : quote(v));
  }
  return out + (first ? "}" : "\n}") + "\n";
}

std::string FlatConfig::to_yaml() const {
  std::string out;
  for (const auto& [k, v] : values_) out += k + ": " + (looks_bare(v) || v.empty() ? v : quote(v)) + "\n";
  return out;
}

}  // namespace torchmt
