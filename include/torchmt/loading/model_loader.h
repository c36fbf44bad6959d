#pragma once
// Opening a model for translation: the one place that turns a path into a Translator, whatever
// the file is (a checkpoint, an imported model, a TorchScript export): the file is read once,
// its seal verified first, its format told from its content (io/model_file.h).
//
//   load_translator(path, device, dtype)
//       a Translator for a checkpoint or an export, as stored (fp32 weights, nothing prepared)
//   load_translator(TranslatorConfig)
//       the same from what a user configured (validated; the translator's threads, not the
//       process's); weights prepared for the CPU's kernels once, here; int8 (`--dtype int8`, or
//       an int8 export at `--dtype auto`) runs the native model with int8 kernels, for
//       checkpoints and exports alike
//   make_translator(ExportedModel, dtype)
//       a Translator over an export's own TorchScript methods
//   seal_model_file(path)
//       adds the checksum to a file of torchmt 0.2 or earlier
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "torchmt/decoding/translator.h"
#include "torchmt/loading/exported_model.h"

namespace torchmt {

// A Translator over an export (dtype: the autocast precision of the decoding, as for a
// checkpoint; the stored weights keep the export's dtype).
Translator make_translator(const ExportedModel& model, c10::ScalarType dtype);
// A checkpoint or a TorchScript export, by content (not by file name).
Translator load_translator(const std::string& path, const c10::Device& device, c10::ScalarType dtype);
// Validates `config` (std::invalid_argument naming the flag) and opens config.model on its
// device in its precision, translating on config.threads CPU threads where set.
Translator load_translator(const TranslatorConfig& config);

// The models of config.models grouped by the direction they record (source and target language):
// one Translator per direction, an ensemble where several models translate it (`serve -m de-en.pt
// -m en-de.pt`), in the order of their first model. `name`: the models' paths joined by '+'.
struct DirectionModel {
  Translator translator;
  std::string name;
};
std::vector<DirectionModel> load_translators_by_direction(const TranslatorConfig& config);

// `torchmt seal`: a checkpoint or export written before torchmt sealed its files gets its seal,
// once it has loaded in full as it is (the file is replaced atomically; one that does not load
// is left untouched and the error names it). A sealed file is verified and left as it is.
enum class SealOutcome { kAlreadySealed, kSealed };
SealOutcome seal_model_file(const std::string& path);

}  // namespace torchmt
