#pragma once
// Validation during training (fairseq's validate + BLEU scoring): the model's loss on the
// validation pairs, and the corpus BLEU of its greedy translations of the validation
// sources against the raw references, as `torchmt evaluate` would score them.
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "torchmt/kernels/runtime.h"
#include "data/parallel_corpus.h"
#include "data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/model/transformer.h"

namespace torchmt {

struct ValidationScores {
  double loss = 0;     // NLL per target token
  double ppl = 0;
  double bleu = 0;
  double seconds = 0;  // wall time of this validation
};

class Validator {
 public:
  // Reads and encodes both files now (every pair is scored: the length filter is at least
  // 1000 tokens); batches by `batch_tokens` for the loss and translates `translate_batch_size`
  // sentences at a time.
  Validator(const std::string& src_path, const std::string& tgt_path, const Tokenizer& src_tokenizer,
            const Tokenizer& tgt_tokenizer,
            CorpusOptions corpus_options, int64_t batch_tokens, int64_t translate_batch_size, c10::Device device,
            c10::ScalarType dtype);
  std::string summary() const { return corpus_.stats.summary(); }
  const EncodedCorpus& corpus() const { return corpus_; }
  // Leaves `model` in train mode. `runtime`: the kernels' settings of its translation (unset:
  // the process's).
  ValidationScores run(Transformer& model, const std::optional<Runtime>& runtime = {}) const;
  // Higher BLEU is better; equal BLEU is broken by lower loss.
  static bool improves(const ValidationScores& scores, double best_bleu, double best_loss);

 private:
  Tokenizer src_tokenizer_, tgt_tokenizer_;
  EncodedCorpus corpus_;
  std::vector<std::string> sources_, references_;
  std::vector<Batch> batches_;
  int64_t translate_batch_size_;
  c10::Device device_;
  c10::ScalarType dtype_;
};

}  // namespace torchmt
