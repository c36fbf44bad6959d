#include "torchmt/training/train_recipes.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

struct Recipe {
  const char* name;
  const char* yaml;  // option keys as in --config
};

// What each setting won against is in README.md ("Recipes"), with the commands that measured it.
const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> table = {
      {"multi30k-15min",
       "preset: small\n"
       "vocab_size: 8000\n"
       "dropout: 0.1\n"
       "label_smoothing: 0.1\n"
       "batch_tokens: 4096\n"
       "lr_schedule: cosine\n"
       "lr: 0.002\n"
       "warmup_fraction: 0.05\n"
       "ema_decay: 0.999\n"
       "max_minutes: 15\n"
       "validate_every: 500\n"},
      {"multi30k-60min",
       "preset: small\n"
       "vocab_size: 8000\n"
       "dropout: 0.2\n"
       "label_smoothing: 0.1\n"
       "batch_tokens: 4096\n"
       "lr_schedule: cosine\n"
       "lr: 0.002\n"
       "warmup_fraction: 0.05\n"
       "ema_decay: 0.999\n"
       "max_minutes: 60\n"
       "validate_every: 1000\n"},
  };
  return table;
}

}  // namespace

std::string recipe_names() {
  std::string names;
  for (const auto& r : recipes()) names += (names.empty() ? "" : ", ") + std::string(r.name);
  return names;
}

FlatConfig recipe_config(const std::string& name) {
  for (const auto& r : recipes())
    if (name == r.name) return FlatConfig::parse(r.yaml);
  throw std::invalid_argument("unknown recipe '" + escape_control(name) + "' (expected " + recipe_names() + ")");
}

FlatConfig with_recipe(const FlatConfig& config) {
  if (!config.has("recipe") || config.get("recipe").empty()) return config;
  FlatConfig merged = recipe_config(config.get("recipe"));
  merged.merge(config);
  return merged;
}

}  // namespace torchmt
