#include "training/validator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

#include "data/text_file.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/evaluation/bleu.h"
#include "model/linear.h"
#include "training/training_step.h"
#include "util/utf8.h"

namespace torchmt {

Validator::Validator(const std::string& src_path, const std::string& tgt_path, const Tokenizer& src_tokenizer,
                     const Tokenizer& tgt_tokenizer, CorpusOptions corpus_options, int64_t batch_tokens,
                     int64_t translate_batch_size, c10::Device device, c10::ScalarType dtype)
    : src_tokenizer_(src_tokenizer),
      tgt_tokenizer_(tgt_tokenizer),
      translate_batch_size_(translate_batch_size),
      device_(device),
      dtype_(dtype) {
  corpus_options.max_sentence_tokens = std::max<int64_t>(corpus_options.max_sentence_tokens, 1000);
  corpus_ = load_parallel_corpus(src_path, tgt_path, src_tokenizer, tgt_tokenizer, corpus_options);
  sources_ = read_lines(src_path);
  references_ = read_lines(tgt_path);
  // Said now, not at the first validation after minutes of training: an empty set scores every
  // validation 0, and a reference BLEU cannot read stops the run there.
  if (references_.empty()) throw std::runtime_error("the validation set " + tgt_path + " holds no lines");
  for (const auto* side : {&sources_, &references_})
    for (size_t i = 0; i < side->size(); ++i)
      if (!is_valid_utf8((*side)[i]))
        throw std::runtime_error((side == &sources_ ? src_path : tgt_path) + ":" + std::to_string(i + 1) +
                                    ": invalid UTF-8 in the validation set");
  BatcherOptions options;
  options.batch_tokens = batch_tokens;
  options.shuffle = false;
  options.special = tgt_tokenizer.special_ids();
  TokenBatcher batcher(corpus_, options);
  for (int64_t i = 0; i < batcher.batches_per_epoch(); ++i) batches_.push_back(batcher.next(device));
}

ValidationScores Validator::run(Transformer& model, const std::optional<Runtime>& runtime) const {
  const auto start = std::chrono::steady_clock::now();
  ValidationScores s;
  s.loss = evaluate_nll(model, batches_, device_, dtype_);
  s.ppl = std::exp(s.loss);
  Translator translator(model, src_tokenizer_, tgt_tokenizer_, device_, dtype_);
  if (runtime) translator.set_runtime(*runtime);
  TranslationOptions options;
  options.batch_size = translate_batch_size_;
  options.search.scores = false;  // BLEU reads the texts only
  // The CPU kernels' packed weights and greedy screen, made from this update's weights, as
  // `translate` makes them at load, and dropped before training goes on.
  if (device_.is_cpu()) prepare_linears_for_inference(*model, InferencePrecision::kFloat, &model->fc_out);
  const auto translations = translator.translate_text(sources_, options);
  release_inference_preparation(*model);
  s.bleu = evaluation::corpus_bleu(translations, references_).score;
  model->train();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

bool Validator::improves(const ValidationScores& s, double best_bleu, double best_loss) {
  return s.bleu > best_bleu || (s.bleu == best_bleu && s.loss < best_loss);
}

}  // namespace torchmt
