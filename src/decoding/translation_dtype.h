#pragma once
// `translate --dtype auto` (and `evaluate`, `serve`): the translator's own search timed in fp32
// and bf16 on a fixed set of sentences with the first job's beam, batch and workers, once per
// machine and model (util/dtype_choice.h). Decoding runs few-row matrix products where
// bf16 rarely pays on a CPU without AMX; this measures instead of assuming.
#include "torchmt/decoding/translation_options.h"
#include "torchmt/decoding/translator.h"
#include "util/dtype_choice.h"

namespace torchmt {

// Sets the chosen dtype on `translator` and returns it with the reason.
DtypeChoice choose_translation_dtype(Translator& translator, const TranslationOptions& options);

}  // namespace torchmt
