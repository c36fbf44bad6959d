#pragma once
// The one table of environment variables torchmt and its tools read, and the one reader of
// them. A value outside a variable's rule is a one-line std::invalid_argument naming the
// variable; an empty value counts as unset. Booleans: 1/true/yes/on or 0/false/no/off.
// `torchmt info --environment` prints the table; tests/environment_test.cpp fails when the
// source reads a variable the table does not list.
#include <optional>
#include <string>
#include <vector>

namespace torchmt {

enum class EnvKind { kFlag, kChoice, kInteger, kText };

struct EnvVariable {
  const char* name;
  EnvKind kind;
  const char* values;         // kChoice: "a|b|c"; otherwise how to write a value
  const char* default_value;  // what applies when it is unset
  const char* meaning;
  const char* reader;         // "torchmt" (the library and CLI) or the scripts that read it
};

// Every variable, in the order the README lists them.
const std::vector<EnvVariable>& environment_table();
// The row of `name`; throws std::logic_error when the table has none (a read of an unlisted variable).
const EnvVariable& environment_variable(const char* name);

// The value as set (nullopt when unset or empty), checked against the variable's rule.
std::optional<std::string> env_value(const char* name);
// kFlag: the variable's boolean, `fallback` when unset.
bool env_flag(const char* name, bool fallback);
// kInteger: the value in [min, max], `fallback` when unset.
int env_int(const char* name, int fallback, int min, int max);

// Checks every variable of the table that is set (rule only; ranges that depend on other
// variables are checked where they are read). Returns the TORCHMT_* variables that are set but
// not in the table (a typo, most likely), for a warning.
std::vector<std::string> check_environment();

// "NAME=value" for each variable of the table that is set, in table order.
std::vector<std::string> environment_in_effect();

}  // namespace torchmt
