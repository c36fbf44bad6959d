// The environment table: one reader, one rule per kind, and no variable read outside it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "test_support.h"
#include "util/environment.h"

namespace torchmt {
namespace {

using test::ScopedEnv;

std::set<std::string> table_names() {
  std::set<std::string> names;
  for (const auto& v : environment_table()) names.insert(v.name);
  return names;
}

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(EnvironmentTable, BooleansFollowOneRule) {
  for (const char* yes : {"1", "true", "YES", "on"}) {
    ScopedEnv e("TORCHMT_SCREENED_ARGMAX", yes);
    EXPECT_TRUE(env_flag("TORCHMT_SCREENED_ARGMAX", false)) << yes;
  }
  for (const char* no : {"0", "false", "No", "off"}) {
    ScopedEnv e("TORCHMT_NO_TENSOR_POOL", no);
    EXPECT_FALSE(env_flag("TORCHMT_NO_TENSOR_POOL", true)) << no;
  }
  {
    ScopedEnv e("TORCHMT_CUDNN_SDPA", "");  // empty is unset
    EXPECT_TRUE(env_flag("TORCHMT_CUDNN_SDPA", true));
    EXPECT_FALSE(env_flag("TORCHMT_CUDNN_SDPA", false));
  }
  ScopedEnv e("TORCHMT_SCREENED_ARGMAX", "2");
  try {
    env_flag("TORCHMT_SCREENED_ARGMAX", false);
    FAIL() << "a bad boolean was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("TORCHMT_SCREENED_ARGMAX=2"), std::string::npos) << error.what();
  }
}

TEST(EnvironmentTable, ChoicesAndIntegersAreChecked) {
  {
    ScopedEnv e("TORCHMT_PACKED_GEMM", "mkl");
    EXPECT_EQ(env_value("TORCHMT_PACKED_GEMM").value_or(""), "mkl");
  }
  {
    ScopedEnv e("TORCHMT_CPU_ISA", "avx");  // a prefix of a choice is not a choice
    EXPECT_THROW(env_value("TORCHMT_CPU_ISA"), std::invalid_argument);
  }
  {
    ScopedEnv e("TORCHMT_CPU_ISA", "avx512-vnni");
    EXPECT_EQ(env_value("TORCHMT_CPU_ISA").value_or(""), "avx512-vnni");
  }
  {
    ScopedEnv e("MASTER_PORT", "70000");
    EXPECT_THROW(env_int("MASTER_PORT", 0, 1, 65535), std::invalid_argument);
  }
  {
    ScopedEnv e("MASTER_PORT", "29500x");
    EXPECT_THROW(env_int("MASTER_PORT", 0, 1, 65535), std::invalid_argument);
  }
  {
    ScopedEnv e("MASTER_PORT", "29501");
    EXPECT_EQ(env_int("MASTER_PORT", 0, 1, 65535), 29501);
  }
  // The checks every command makes (check_environment) hold an integer to its row's numbers.
  for (const auto& [name, value] : std::vector<std::pair<const char*, const char*>>{
           {"WORLD_SIZE", "0"}, {"NNODES", "0"}, {"MASTER_PORT", "0"}, {"MASTER_PORT", "65536"}, {"RANK", "-1"}}) {
    ScopedEnv e(name, value);
    EXPECT_THROW(env_value(name), std::invalid_argument) << name << "=" << value;
  }
  {
    ScopedEnv e("WORLD_SIZE", "2");
    EXPECT_EQ(env_value("WORLD_SIZE").value_or(""), "2");
  }
  ScopedEnv e("MASTER_PORT", nullptr);
  EXPECT_EQ(env_int("MASTER_PORT", 7, 1, 65535), 7);
  // A read of a variable the table does not list is a programming error.
  EXPECT_THROW(env_value("TORCHMT_NOT_A_VARIABLE"), std::logic_error);
  EXPECT_THROW(env_flag("TORCHMT_PACKED_GEMM", false), std::logic_error);  // not a boolean
}

TEST(EnvironmentTable, CheckingTheEnvironmentNamesUnknownVariables) {
  ScopedEnv typo("TORCHMT_SCREEND_ARGMAX", "0");
  const auto unknown = check_environment();
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "TORCHMT_SCREEND_ARGMAX"), unknown.end());
  ScopedEnv bad("TORCHMT_DIST_BACKEND", "mpi");
  EXPECT_THROW(check_environment(), std::invalid_argument);
}

// Every read goes through the table: the library's sources call the reader with listed names
// only (getenv of a TORCHMT_ variable elsewhere fails), and the scripts expand listed names only.
TEST(EnvironmentTable, TheSourceReadsOnlyVariablesTheTableLists) {
  namespace fs = std::filesystem;
  const auto listed = table_names();
  const fs::path root = test::source_dir();
  const std::regex getenv_call(R"(getenv\(\s*\"([A-Za-z0-9_]+)\")");
  const std::regex reader_call(R"(env_(?:value|flag|int)\(\s*\"([A-Za-z0-9_]+)\")");
  const std::regex script_read(R"(\$\{?(TORCHMT_[A-Z0-9_]+))");
  int reads = 0;
  for (const char* dir : {"src", "include", "tools", "tests/fuzz"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      if (!entry.is_regular_file()) continue;
      const auto ext = entry.path().extension().string();
      const std::string text = file_text(entry.path());
      const std::string where = fs::relative(entry.path(), root).string();
      if (ext == ".cpp" || ext == ".h") {
        for (std::sregex_iterator m(text.begin(), text.end(), getenv_call), end; m != end; ++m) {
          const std::string name = (*m)[1];
          if (where == "src/util/environment.cpp") continue;
          EXPECT_TRUE(name.rfind("TORCHMT_", 0) != 0 && listed.count(name) == 0)
              << where << " reads " << name << " with getenv instead of the environment table's reader";
        }
        for (std::sregex_iterator m(text.begin(), text.end(), reader_call), end; m != end; ++m, ++reads)
          EXPECT_EQ(listed.count((*m)[1]), 1u) << where << " reads " << (*m)[1] << ", which the table does not list";
      } else if (ext == ".sh") {
        for (std::sregex_iterator m(text.begin(), text.end(), script_read), end; m != end; ++m, ++reads)
          EXPECT_EQ(listed.count((*m)[1]), 1u) << where << " reads " << (*m)[1] << ", which the table does not list";
      }
    }
  }
  EXPECT_GT(reads, 20);  // the scan found the reads it is meant to check
}

// The CLI checks the whole table before any work, and `info` shows what is set.
TEST(EnvironmentTable, TheCommandLineRefusesABadValueAndShowsWhatIsSet) {
  const std::string tm = test::torchmt_binary();
  auto r = test::run_command("TORCHMT_SCREENED_ARGMAX=maybe " + tm + " info --preset tiny");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("TORCHMT_SCREENED_ARGMAX=maybe"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  r = test::run_command("TORCHMT_PACKED_GEMM=aten TORCHMT_FOO=1 " + tm + " info --preset tiny");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  TORCHMT_PACKED_GEMM=aten\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("warning: TORCHMT_FOO is set"), std::string::npos) << r.output;
  r = test::run_command(tm + " info --environment");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const auto& v : environment_table()) EXPECT_NE(r.output.find(v.name), std::string::npos) << v.name;
}

}  // namespace torchmt
