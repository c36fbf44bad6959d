#pragma once
// Corpus cleaning by dual conditional cross-entropy (Junczys-Dowmunt 2018, "Dual Conditional
// Cross-Entropy Filtering of Noisy Parallel Corpora"): a pair (x, y) is scored by a model x->y
// and a model y->x, each giving the per-piece cross-entropy of its side (eos included),
//   H_f = -log P_f(y | x) / |y|,  H_b = -log P_b(x | y) / |x|,
//   score = |H_f - H_b| + (H_f + H_b) / 2   (lower is better; exp(-score) in (0, 1]),
// so a pair must be probable both ways, and about equally so.
// Contrasted (CorpusFilterOptions::contrast), each side's cross-entropy is measured against the same
// side given an unrelated other side x' (y'), as margin-based bitext mining scores a pair against
// its neighbours (Artetxe & Schwenk 2019):
//   D_f = H_f(y | x) - H_f(y | x'),  D_b = H_b(x | y) - H_b(x | y'),  score = exp(D_f + D_b)
// (lower is better; 1: no likelier with its own side than with another). Models trained on a noisy
// corpus find any fluent side probable; the difference cancels that.
#include <cstdint>
#include <string>
#include <vector>

#include "torchmt/decoding/translator.h"

namespace torchmt {

struct DualScore {
  double forward = 0.0;   // H_f, nats per target piece (contrasted: D_f)
  double backward = 0.0;  // H_b, nats per source piece (contrasted: D_b)
  double score = 0.0;
  bool truncated = false;  // a side longer than a model accepts was cut before scoring
};

// The unrelated sides a contrasted score measures pair i against: targets[i] given sources[i], and
// sources[i] given targets[i] (another pair's, as the caller chooses them).
struct ContrastSides {
  std::vector<std::string> sources, targets;
};

// The dual scores of pairs (line i of sources with line i of targets), contrasted when `contrast`
// is given; std::invalid_argument when the counts differ. `done`: progress, in pairs, once per
// model's batch (each pair counts twice, contrasted four times).
std::vector<DualScore> dual_cross_entropy(Translator& forward, Translator& backward,
                                          const std::vector<std::string>& sources,
                                          const std::vector<std::string>& targets, const TranslationOptions& options,
                                          const std::function<void(int64_t)>& done = {},
                                          const ContrastSides* contrast = nullptr);

// Whether `model` translates sources -> targets rather than the other way, judged on pairs: its
// mean per-piece cross-entropy both ways (`along` sources -> targets, `against` the reverse).
struct DirectionCheck {
  double along = 0.0, against = 0.0;
  int64_t pairs = 0;
  bool agrees() const { return along <= against; }
};
DirectionCheck check_direction(Translator& model, const std::vector<std::string>& sources,
                               const std::vector<std::string>& targets, const TranslationOptions& options);

}  // namespace torchmt
