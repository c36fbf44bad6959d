#include "serving/access_control.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "util/atomic_file.h"
#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

// Equal in time that depends on the longer length only, never on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned difference = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<unsigned>(x ^ y);
  }
  return difference == 0;
}

int64_t limit_field(const std::string& text, const std::string& where) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 1 || v > 1000000000LL)
    throw std::runtime_error(where + ": '" + escape_control(text) + "' is not a limit (a whole number >= 1)");
  return v;
}

}  // namespace

ApiKeys ApiKeys::load(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("API keys file: ") + e.what());
  }
  return parse(text, path);
}

ApiKeys ApiKeys::parse(const std::string& text, const std::string& source) {
  if (!is_valid_utf8(text)) throw std::runtime_error("API keys file " + source + " is not valid UTF-8");
  ApiKeys keys;
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::vector<std::string> words;
    for (std::string w; fields >> w;) words.push_back(w);
    if (words.empty()) continue;
    const std::string where = "API keys file " + source + " line " + std::to_string(number);
    if (words.size() > 3)
      throw std::runtime_error(where + ": expected KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT]], got " +
                               std::to_string(words.size()) + " fields");
    ApiKey key{words[0], -1, -1};
    if (key.key.size() < 8) throw std::runtime_error(where + ": a key of fewer than 8 characters is too easy to guess");
    if (words.size() > 1) key.requests_per_minute = limit_field(words[1], where);
    if (words.size() > 2) key.char_limit = limit_field(words[2], where);
    for (const auto& k : keys.keys_)
      if (k.key == key.key) throw std::runtime_error(where + ": a key given twice");
    keys.keys_.push_back(std::move(key));
  }
  if (keys.keys_.empty()) throw std::runtime_error("API keys file " + source + " holds no key");
  return keys;
}

std::optional<ApiKey> ApiKeys::find(const std::string& given) const {
  std::optional<ApiKey> found;
  for (const auto& k : keys_)
    if (constant_time_equal(k.key, given)) found = k;  // no early exit
  return found;
}

int64_t RequestLimiter::take(const std::string& client, int64_t per_minute, Clock::time_point now) {
  const double rate = static_cast<double>(per_minute) / 60.0;  // tokens per second
  std::lock_guard<std::mutex> lock(mutex_);
  if (now - last_sweep_ > std::chrono::seconds(60) && buckets_.size() > 1024) {
    for (auto it = buckets_.begin(); it != buckets_.end();)
      it = now - it->second.last > std::chrono::seconds(60) ? buckets_.erase(it) : std::next(it);
    last_sweep_ = now;
  }
  auto [it, fresh] = buckets_.try_emplace(client);
  Bucket& b = it->second;
  const double capacity = static_cast<double>(per_minute);
  if (fresh) {
    b.tokens = capacity;
  } else {
    const double elapsed = std::max(0.0, std::chrono::duration<double>(now - b.last).count());
    b.tokens = std::min(capacity, b.tokens + elapsed * rate);
  }
  b.last = now;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return 0;
  }
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil((1.0 - b.tokens) / rate)));
}

}  // namespace torchmt
