#pragma once
// Who may use the server, and how much: LibreTranslate's operator controls.
//
//   ApiKeys         --api-keys FILE: one key per line, `KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT]]`
//                   ('#' starts a comment); keys are compared in constant time and never logged
//   RequestLimiter  requests per minute per client address (--req-limit) or per key (its own
//                   limit): a token bucket each, refilled continuously, so bursts up to the limit
//                   pass and a client over it is told when to retry
// Light header: no LibTorch.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace torchmt {

struct ApiKey {
  std::string key;
  int64_t requests_per_minute = -1;  // -1: the server's --req-limit
  int64_t char_limit = -1;           // -1: the server's --char-limit
};

class ApiKeys {
 public:
  ApiKeys() = default;
  // std::runtime_error naming the file and line for a malformed one (or none at all).
  static ApiKeys load(const std::string& path);
  static ApiKeys parse(const std::string& text, const std::string& source);
  // The key equal to `given` (every key compared in full, whatever matches: no timing to learn
  // a key from); nullopt when none is.
  std::optional<ApiKey> find(const std::string& given) const;
  size_t size() const { return keys_.size(); }

 private:
  std::vector<ApiKey> keys_;
};

class RequestLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // Takes one request of `client` at `now` under `per_minute` (> 0); 0 when it may go on, else the
  // seconds until it may (HTTP's Retry-After). Thread-safe. Clients idle for a minute are
  // forgotten, so memory stays bounded by the clients of the last minute.
  int64_t take(const std::string& client, int64_t per_minute, Clock::time_point now = Clock::now());

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point last;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, Bucket> buckets_;
  Clock::time_point last_sweep_{};
};

}  // namespace torchmt
