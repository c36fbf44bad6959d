// Option parsing shared by the benchmark programs (header-only: each bench is one source file).
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace torchmt::bench {

// Items of s between separators, empty ones dropped.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// A comma-separated list of positive integers given to --flag; a bad or empty list is an error
// naming the flag.
inline std::vector<int64_t> parse_ints(const std::string& s, const std::string& flag) {
  std::vector<int64_t> out;
  for (const auto& item : split(s, ',')) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) throw std::invalid_argument("--" + flag + ": bad value '" + item + "'");
    out.push_back(v);
  }
  if (out.empty()) throw std::invalid_argument("--" + flag + " is empty");
  return out;
}

}  // namespace torchmt::bench
