#pragma once
// Checkpoints: one file holding the model, the optimizer state, the training position,
// RNG states, the configuration and the tokenizer model(s), so that a run resumes exactly
// and `translate` / `export` need nothing else. The file is the torch.save zip format
// (torch::pickle_save), so Python's torch.load(weights_only=False) can read it too.
// Writes go to a temporary file that is flushed, fsync'ed and renamed: a kill at any
// moment leaves the previous checkpoint loadable.
#include <limits>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "torchmt/data/language_identifier.h"
#include "torchmt/data/tokenizer.h"
#include "io/training_position.h"
#include "torchmt/model/model_config.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

// An optimizer's state as checkpoints store it: one tensor per parameter each (Adam's first
// and second moments and step counts). Tensors are handles: restoring copies into them.
struct OptimizerState {
  std::vector<at::Tensor> exp_avg, exp_avg_sq, steps;
  // The exponential moving average of the weights (--ema-decay; Marian keeps it with the
  // optimizer too), one entry per unique parameter; empty when off.
  std::vector<at::Tensor> ema;
  // fp16 dynamic loss scaling (CUDA): the scale ([] fp32) and the clean updates since it last
  // changed ([] int32), so a resumed run goes on with the scale it had; undefined otherwise.
  at::Tensor loss_scale, growth_tracker;
};

struct CheckpointMeta {
  ModelConfig model;
  std::string train_config;  // the effective training configuration (YAML)
  std::string src_spm_path, src_spm_checksum, src_spm_model;  // model = serialized SentencePiece proto
  std::string tgt_spm_path, tgt_spm_checksum, tgt_spm_model;  // equal to src_* for a joint vocabulary
  // An explicit vocabulary shared by both sides (Vocabulary::pieces_to_json; an imported Marian
  // model's vocab.json), its special ids in `model`; empty: the SentencePiece models' own ids.
  std::string vocabulary;
  // What the model translates from and into, and its language identifier (serialized); empty
  // for a checkpoint written before torchmt 0.3 recorded them.
  std::string source_language, target_language, language_identifier;
  bool both_directions = false;  // trained with --both-directions: translates target -> source too
  // Its output columns for each way (ModelLanguages::target_columns, source_columns).
  std::vector<int64_t> target_columns, source_columns;
  TrainingPosition position;
};

// The source and target tokenizers of a checkpoint or an export (the same one for a joint
// vocabulary). Throws std::runtime_error with a message to follow the file's name.
std::pair<Tokenizer, Tokenizer> make_tokenizers(const std::string& src_spm_model, const std::string& tgt_spm_model,
                                                const std::string& vocabulary, const ModelConfig& config);
std::pair<Tokenizer, Tokenizer> checkpoint_tokenizers(const CheckpointMeta& meta);
// The languages a checkpoint records (std::runtime_error for a corrupt identifier).
ModelLanguages checkpoint_languages(const CheckpointMeta& meta);

// Atomic write. `optimizer` may be null (averaged / exported-for-inference checkpoints).
void save_checkpoint(const std::string& path, const Transformer& model, const OptimizerState* optimizer,
                     const CheckpointMeta& meta);

// What a loaded checkpoint holds. Errors (missing, corrupt, truncated, not a torchmt
// checkpoint, wrong shapes) are std::runtime_error naming the file.
struct LoadedCheckpoint {
  CheckpointMeta meta;
  Transformer model{nullptr};  // built from meta.model, weights loaded, on `device`, eval mode
};
LoadedCheckpoint load_checkpoint(const std::string& path, const c10::Device& device);
// kOwn: the weights in memory of their own. kFileMapped: weights the file holds aligned stay
// its mapped, read-only pages (read when used; io/model_file.h), for a loader that replaces most
// of them (int8) and calls own_file_pages on the rest before anything writes them: a long-lived
// model must not depend on a file that may be overwritten in place.
enum class WeightMemory { kOwn, kFileMapped };
class ModelFile;
LoadedCheckpoint load_checkpoint(const ModelFile& file, const c10::Device& device,
                                 WeightMemory memory = WeightMemory::kOwn);  // io/model_file.h

// Parameter averaging (Vaswani et al. average the last 5 or 20 checkpoints): the mean of
// every parameter over `paths`, on the CPU, with the first checkpoint's metadata. Throws
// naming the file when shapes or tokenizers differ.
LoadedCheckpoint average_checkpoints(const std::vector<std::string>& paths);

// Restores weights, optimizer state and RNG states into an existing training set-up.
// Throws if the checkpoint's model shape differs from `model`'s.
CheckpointMeta restore_training_state(const std::string& path, Transformer& model, OptimizerState& optimizer);

// Unique parameters of a module (tied tensors once), in registration order.
std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module);

}  // namespace torchmt
