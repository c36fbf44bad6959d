#pragma once
// The corpora a run trains on: one pair of text files (--train-src/--train-tgt), one
// preprocessed dataset (--train-data DIR), or several of either mixed with weights
// (--train-data corpora.yaml, OpenNMT-py's `data:` with weights):
//
//   corpora:
//     - {name: in-domain, src: train.de.gz, tgt: train.en.gz, weight: 3}
//     - {name: web, data: web.dataset, weight: 1}
//
// Text is preprocessed into the run's cache once (binary_dataset.h); datasets are mapped.
#include <memory>
#include <string>
#include <vector>

#include "data/binary_dataset.h"
#include "data/token_batcher.h"
#include "torchmt/training/train_options.h"

namespace torchmt {

struct CorpusSpec {
  std::string name;
  std::string data;      // a dataset directory, or
  std::string src, tgt;  // text files
  double weight = 0;     // 0 everywhere: each corpus once per epoch
};

// Throws std::invalid_argument naming the file and entry for a malformed list (unknown key,
// missing side, weight <= 0 on some entries but not all, duplicate names).
std::vector<CorpusSpec> corpus_specs(const TrainOptions& options);

// The SentencePiece model a run without --spm uses: the first dataset's, else none ("").
std::string dataset_tokenizer(const std::vector<CorpusSpec>& specs);

class TrainingCorpora {
 public:
  // Opens every dataset (checking it was encoded with the tokenizers and max_sentence_tokens) and
  // preprocesses text corpora into `cache_dir`; `log` receives one line per corpus. With
  // `both_directions`, each corpus is drawn a second time with its sides swapped ("NAME reversed",
  // the same weight), which needs one tokenizer for both sides (std::invalid_argument otherwise).
  TrainingCorpora(const std::vector<CorpusSpec>& specs, const Tokenizer& src_tokenizer,
                  const Tokenizer& tgt_tokenizer, const std::string& cache_dir,
                  const PreprocessOptions& options, const std::function<void(const std::string&)>& log,
                  bool both_directions = false);
  // What the batcher draws from: the corpora, then their reversed copies.
  std::vector<CorpusShare> shares() const;
  // The corpora as given (source -> target), e.g. to learn the languages from.
  std::vector<CorpusShare> forward_shares() const;
  int64_t pairs() const;  // of every share
  const std::vector<CorpusSpec>& specs() const { return specs_; }
  // "name=count;name=count" from the batcher's drawn_pairs(), for metrics.csv, and
  // "name 12,345 (66.7%), ..." for the log.
  std::string counts_field(const std::vector<int64_t>& drawn) const;
  std::string counts_text(const std::vector<int64_t>& drawn) const;

 private:
  std::vector<CorpusSpec> specs_;
  std::vector<std::unique_ptr<BinaryDataset>> datasets_;
  std::vector<std::unique_ptr<ReversedPairs>> reversed_;  // one per dataset with both_directions
};

}  // namespace torchmt
