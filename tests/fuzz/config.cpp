// Fuzz target: the configuration reader (util/flat_config.h on yaml-cpp and nlohmann/json) and
// what reads its result: the training options table and a checkpoint's model configuration.
#include <cmath>
#include <cstdlib>

#include "fuzz_support.h"
#include "torchmt/model/model_config.h"
#include "torchmt/training/train_options.h"
#include "torchmt/util/flat_config.h"

using namespace torchmt;

namespace {

// Equal text, or (`numbers_by_value`: JSON writes numbers as numbers, "0E00" reads back as
// "0.0") the same finite number.
bool same_value(const std::string& a, const std::string& b, bool numbers_by_value) {
  if (a == b) return true;
  if (!numbers_by_value || a.empty() || b.empty()) return false;
  char *end_a = nullptr, *end_b = nullptr;
  const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
  return *end_a == '\0' && *end_b == '\0' && std::isfinite(x) && x == y;
}

bool same(const FlatConfig& a, const FlatConfig& b, bool numbers_by_value = false) {
  if (a.keys() != b.keys()) return false;
  for (const auto& key : a.keys()) {
    if (a.values().count(key) != b.values().count(key)) return false;  // a value vs a list
    const auto x = a.get_list(key), y = b.get_list(key);
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!same_value(x[i], y[i], numbers_by_value)) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(fuzz::as_text(data, size));
  FlatConfig config;
  try {
    config = FlatConfig::parse(text);
  } catch (const std::exception& e) {
    fuzz::check_error_message(e);
    return 0;
  }
  // What torchmt writes, it reads back unchanged, in both formats.
  FUZZ_CHECK(same(FlatConfig::parse(config.to_yaml()), config));
  FUZZ_CHECK(same(FlatConfig::parse(config.to_json()), config, /*numbers_by_value=*/true));

  try {
    const TrainOptions options = TrainOptions::from_config(config);
    const FlatConfig written = options.to_config();
    FUZZ_CHECK(same(TrainOptions::from_config(FlatConfig::parse(written.to_yaml())).to_config(), written));
  } catch (const std::invalid_argument& e) {
    fuzz::check_error_message(e);
  }
  try {
    const ModelConfig model = ModelConfig::from_json(text);
    FUZZ_CHECK(ModelConfig::from_json(model.to_json()).to_json() == model.to_json());
  } catch (const std::exception& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
