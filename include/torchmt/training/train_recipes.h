#pragma once
// Named training recipes (`train --recipe NAME`): the settings that won a search on the
// validation set for one corpus and time budget on a 2-core CPU (tools/recipes/README.md). A recipe
// is a set of option defaults, read through the same option table as flags and --config, which
// override it; the run's config.yaml records the effective values.
#include <string>

#include "torchmt/util/flat_config.h"

namespace torchmt {

// "multi30k-15min, multi30k-60min": for --help and error messages.
std::string recipe_names();
// The recipe's settings; throws std::invalid_argument naming the known ones for any other name.
FlatConfig recipe_config(const std::string& name);
// `config` with the recipe it names (key "recipe") underneath it; unchanged without one.
FlatConfig with_recipe(const FlatConfig& config);

}  // namespace torchmt
