#pragma once
// One table per option set (training, translation, model configuration, each subcommand):
// a row per option with its key, type, default and help. The default is read from a
// default-constructed `Options`, so it is typed once, in the struct. From the same rows the
// table reads the set from a FlatConfig (YAML/JSON file or flags), writes it back (run
// configs, --dump-config, checkpoint metadata), and the CLI makes the flags and the help
// text (src/cli/cli_options.h), so the four never drift apart.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <limits>
#include <iostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "torchmt/util/flat_config.h"
#include "torchmt/util/strings.h"

namespace torchmt {

enum class OptionKind { kText, kInteger, kReal, kBool, kList };

// The command-line spelling of a config key: `max_len_a` -> `max-len-a`.
inline std::string flag_name(std::string key) {
  for (auto& c : key)
    if (c == '_') c = '-';
  return key;
}

struct OptionRow {
  std::string key;                    // snake_case config key; the flag is the key with '-' for '_'
  OptionKind kind = OptionKind::kText;
  std::string help;
  std::string default_text;           // as written back; empty = none shown
  std::string short_flag;             // e.g. "m" for -m; empty = none
  std::string group;                  // section of --help
  std::vector<std::string> old_keys;  // earlier names: still read, with a warning
  std::string flag() const { return flag_name(key); }
};

// Extra, optional properties of a row.
struct OptionExtra {
  std::string short_flag;
  std::string group;
  std::vector<std::string> old_keys;
};

// Shortest decimal text that reads back as the same double ("0.1", not "0.100000").
inline std::string real_text(double v) {
  char buf[40];
  // Whole numbers as whole numbers: %g would write 600 as "6e+02" at one digit of precision.
  if (std::isfinite(v) && std::fabs(v) < 1e15 && v == std::trunc(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// An integer option's value in its field's type, or a one-line error: a 32-bit field given
// 4294967596 must not wrap round to 300.
template <typename T>
T narrowed(const std::string& key, int64_t value) {
  if constexpr (std::is_integral_v<T> && (sizeof(T) < sizeof(int64_t) || std::is_unsigned_v<T>)) {
    const int64_t lowest = static_cast<int64_t>(std::numeric_limits<T>::min());
    bool fits = value >= lowest;
    if constexpr (sizeof(T) < sizeof(int64_t)) fits = fits && value <= static_cast<int64_t>(std::numeric_limits<T>::max());
    if (!fits)
      throw std::invalid_argument("config key " + key + " is out of range: " + std::to_string(value) + " (from " +
                                  std::to_string(lowest) + " to " + std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  return static_cast<T>(value);
}

template <typename Options>
class OptionTable {
 public:
  explicit OptionTable(std::string name) : name_(std::move(name)) {}

  // A field reached through `ref` (a pointer to member, or a callable returning a reference
  // into Options, so nested members work); its type decides the row's kind.
  template <typename Ref>
  OptionTable& add(const std::string& key, Ref ref, const std::string& help, OptionExtra extra = {}) {
    using T = std::remove_cv_t<std::remove_reference_t<std::invoke_result_t<Ref, Options&>>>;
    Entry e;
    e.row = make_row(key, kind_of<T>(), help, std::move(extra));
    e.read = [ref, key](Options& o, const FlatConfig& c, const std::string& k) {
      T& field = std::invoke(ref, o);
      if constexpr (std::is_same_v<T, std::string>) field = c.get(k);
      else if constexpr (std::is_same_v<T, std::vector<std::string>>) field = c.get_list(k);
      else if constexpr (std::is_same_v<T, bool>) field = c.get_bool(k);
      else if constexpr (std::is_floating_point_v<T>) field = static_cast<T>(c.get_double(k));
      else field = narrowed<T>(k, c.get_int(k));
    };
    e.write = [ref](const Options& o, FlatConfig& c, const std::string& k) {
      // The accessor takes a non-const Options (one accessor reads and writes); it is only read here.
      const T& field = std::invoke(ref, const_cast<Options&>(o));
      if constexpr (std::is_same_v<T, std::vector<std::string>>) c.set_list(k, field);
      else c.set(k, text_of(field));
    };
    e.row.default_text = default_text(e);
    entries_.push_back(std::move(e));
    return *this;
  }

  // A field with its own text form (an enum, an inverted switch): `parse` may throw
  // std::invalid_argument; `print` gives the text that `parse` reads back.
  OptionTable& add_custom(const std::string& key, OptionKind kind, const std::string& help,
                          std::function<void(Options&, const std::string&)> parse,
                          std::function<std::string(const Options&)> print, OptionExtra extra = {}) {
    Entry e;
    e.row = make_row(key, kind, help, std::move(extra));
    e.read = [parse, kind](Options& o, const FlatConfig& c, const std::string& k) {
      parse(o, kind == OptionKind::kBool ? (c.get_bool(k) ? "true" : "false") : c.get(k));
    };
    e.write = [print](const Options& o, FlatConfig& c, const std::string& k) { c.set(k, print(o)); };
    e.row.default_text = default_text(e);
    entries_.push_back(std::move(e));
    return *this;
  }

  // Every row of `inner`, reached through `part` (a member of Options of type Inner). With a
  // `prefix` ("teacher_"), each key gets it and short flags are left out, so two option sets
  // with keys in common (a teacher's translation, a student's training) can share one table.
  // `skip`: inner keys left out (fields the including options set themselves).
  template <typename Inner, typename Part>
  OptionTable& include(const OptionTable<Inner>& inner, Part part, const std::string& prefix = "",
                       const std::vector<std::string>& skip = {}) {
    for (const auto& ie : inner.entries()) {
      if (std::find(skip.begin(), skip.end(), ie.row.key) != skip.end()) continue;
      Entry e;
      e.row = ie.row;
      if (!prefix.empty()) {
        e.row.key = prefix + e.row.key;
        e.row.short_flag.clear();
        for (auto& old : e.row.old_keys) old = prefix + old;
        // "teacher_" + "decoding": the --help section "teacher decoding"
        if (!e.row.group.empty()) e.row.group = prefix.substr(0, prefix.find_last_not_of('_') + 1) + " " + e.row.group;
      }
      if (find(e.row.key)) throw std::logic_error(name_ + " option table: key '" + e.row.key + "' twice");
      e.read = [part, read = ie.read](Options& o, const FlatConfig& c, const std::string& k) {
        read(std::invoke(part, o), c, k);
      };
      e.write = [part, write = ie.write](const Options& o, FlatConfig& c, const std::string& k) {
        write(std::invoke(part, const_cast<Options&>(o)), c, k);  // read only, as in add()
      };
      e.row.default_text = default_text(e);
      entries_.push_back(std::move(e));
    }
    return *this;
  }

  const std::string& name() const { return name_; }
  std::vector<OptionRow> rows() const {
    std::vector<OptionRow> out;
    for (const auto& e : entries_) out.push_back(e.row);
    return out;
  }

  // `start` with every key of `config` applied. Unknown keys and values of the wrong type
  // throw std::invalid_argument naming the key; a key under an earlier name is read with a
  // warning on stderr.
  Options read(const FlatConfig& config, Options start = Options{}, bool warn_old_keys = true) const {
    for (const auto& key : config.keys()) {
      const Entry* entry = find(key);
      if (!entry) throw std::invalid_argument("unknown " + name_ + " option '" + escape_control(key) + "'");
      if (warn_old_keys && entry->row.key != key)
        std::cerr << "warning: " << name_ << " option '" << key << "' is now called '" << entry->row.key << "'\n";
      try {
        entry->read(start, config, key);
      } catch (const std::invalid_argument&) {
        throw;
      } catch (const std::exception& e) {
        throw std::invalid_argument(e.what());
      }
    }
    return start;
  }

  FlatConfig write(const Options& options) const {
    FlatConfig c;
    for (const auto& e : entries_) e.write(options, c, e.row.key);
    return c;
  }

  // The row that reads `key` (its current or an earlier name), or null.
  const OptionRow* row(const std::string& key) const {
    const Entry* e = find(key);
    return e ? &e->row : nullptr;
  }

  struct Entry {
    OptionRow row;
    std::function<void(Options&, const FlatConfig&, const std::string&)> read;
    std::function<void(const Options&, FlatConfig&, const std::string&)> write;
  };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  template <typename T>
  static constexpr OptionKind kind_of() {
    if constexpr (std::is_same_v<T, std::string>) return OptionKind::kText;
    else if constexpr (std::is_same_v<T, std::vector<std::string>>) return OptionKind::kList;
    else if constexpr (std::is_same_v<T, bool>) return OptionKind::kBool;
    else if constexpr (std::is_floating_point_v<T>) return OptionKind::kReal;
    else {
      static_assert(std::is_integral_v<T>, "option fields are text, lists of text, booleans or numbers");
      return OptionKind::kInteger;
    }
  }
  template <typename T>
  static std::string text_of(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) return v;
    else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    else if constexpr (std::is_floating_point_v<T>) return real_text(static_cast<double>(v));
    else return std::to_string(v);
  }
  OptionRow make_row(const std::string& key, OptionKind kind, const std::string& help, OptionExtra extra) const {
    if (find(key)) throw std::logic_error(name_ + " option table: key '" + key + "' twice");
    OptionRow row;
    row.key = key;
    row.kind = kind;
    row.help = help;
    row.short_flag = std::move(extra.short_flag);
    row.group = std::move(extra.group);
    row.old_keys = std::move(extra.old_keys);
    return row;
  }
  static std::string default_text(const Entry& e) {
    FlatConfig c;
    e.write(Options{}, c, e.row.key);
    if (e.row.kind == OptionKind::kList) {
      std::string joined;
      for (const auto& v : c.get_list(e.row.key)) joined += (joined.empty() ? "" : " ") + v;
      return joined;
    }
    return c.get(e.row.key);
  }
  const Entry* find(const std::string& key) const {
    for (const auto& e : entries_) {
      if (e.row.key == key) return &e;
      for (const auto& old : e.row.old_keys)
        if (old == key) return &e;
    }
    return nullptr;
  }

  std::string name_;
  std::vector<Entry> entries_;
};

}  // namespace torchmt
