#pragma once
// Cleaning a parallel corpus by dual conditional cross-entropy (dual_cross_entropy.h): the work of
// `torchmt filter` and of torchmt.filter in Python. Two passes over the files: every pair's score
// (about 40 bytes a pair in memory, never the corpus), then each pair to the kept or the dropped
// output. A pair that cannot be scored (an empty side, invalid UTF-8) is dropped with its reason,
// never the job; the outputs appear whole or not at all. With `realign`, a third pass re-pairs
// dropped pairs whose targets belong to other dropped sources (it holds the dropped pairs' text).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "torchmt/decoding/translator.h"
#include "torchmt/util/option_table.h"
#include "torchmt/util/strings.h"

namespace torchmt {

struct CorpusFilterOptions {
  std::string src, tgt;            // the corpus, line for line (files: they are read twice)
  std::string kept_src, kept_tgt;  // where the kept pairs go
  // Optional ("": not written). dropped: TSV of line, score, forward and backward cross-entropy,
  // reason, source, target; scores: TSV of score, forward, backward, a line per pair.
  std::string dropped, scores;
  // The threshold, exactly one of: max_score > 0 (nats per piece; lower is better); keep_fraction
  // in (0, 1] of the scored pairs; clean reference pairs (e.g. the validation set), whose scores'
  // reference_quantile becomes the threshold, so no noise rate need be known.
  double max_score = 0.0, keep_fraction = 0.0;
  std::string reference_src, reference_tgt;
  // 0.95: any quantile from 0.90 to 0.98 removed >= 90% of the corrupted pairs and dropped <= 1% of the
  // clean ones in tools/bench/filter_noise.py's corpus; 0.99 removed 89.7%.
  double reference_quantile = 0.95;
  // Score each side against the same side given another pair's (dual_cross_entropy.h): the score
  // becomes exp(D_f + D_b). Models trained on the noisy corpus itself (torchmt clean) give any
  // fluent target some probability; contrasted, their scores of filter_noise.py's shuffled pairs
  // and clean ones overlap far less (ROC AUC 0.936 -> 0.995). Each pair is scored twice as often.
  bool contrast = false;
  // Drop the pairs whose length ratio (target pieces per source piece, eos counted) lies outside
  // the reference pairs' length_quantile and 1 - length_quantile quantiles (without reference pairs,
  // the corpus's own): a side cut short or run on. Per-piece scores see a missing half little and
  // contrasted ones less (its cost is the target's own, which the contrast cancels); re-paired pairs
  // are held to the bounds too. 0: off.
  double length_quantile = 0.002;
  int64_t buffer_size = 4096;  // pairs read and scored at a time
  // Drop, unscored, the pairs whose target reads as the source's language or whose source reads as
  // the target's (copies, swapped sides), when the forward model knows both languages: models
  // trained on such pairs learn to find them probable.
  bool language_check = true;
  // Re-pair the dropped pairs (a corpus whose lines slipped or whose targets were shuffled): each
  // dropped source's greedy translation finds the dropped targets sharing its rarer words, the
  // realign_candidates likeliest are scored as every pair is, and a pair scoring within the kept
  // pairs' realign_quantile is kept at its source's line, each source and target used once (the
  // best scores first). A re-paired line is a bolder claim than a kept one: at the threshold itself
  // a fifth of filter_noise.py's re-paired sources got another's target, at the 0.9 quantile 5%.
  bool realign = false;  // (its sources may be those dropped for their language, its targets not)
  int64_t realign_candidates = 3;
  double realign_quantile = 0.9;  // 1: the threshold itself
  std::string realigned;  // optional TSV of the re-paired: source line, target line, score, forward, backward
  // The number the outputs give src's first line: a part of a larger corpus numbered as in the whole.
  int64_t first_line = 1;
  // How messages name the models (the command line's flags and paths).
  std::string forward_name = "the forward model", backward_name = "the backward model";

  // std::invalid_argument naming the option (the flags' names: --max-score, ...).
  void validate() const;
};

// The flags of every field above but first_line and the models' names (`filter`, `clean`).
const OptionTable<CorpusFilterOptions>& corpus_filter_option_table();

struct CorpusFilterReport {
  int64_t pairs = 0, kept = 0;
  int64_t dropped_by_score = 0, dropped_by_length = 0, unscorable = 0, wrong_language = 0;  // the dropped, by why
  LineSample truncated;         // the pairs scored with a side cut to what a model accepts
  double threshold = 0.0;       // the score kept pairs are at most
  // The length ratios (target pieces per source piece) kept pairs lie within; 0, 0: no bounds.
  double length_low = 0.0, length_high = 0.0;
  int64_t reference_pairs = 0;  // the reference pairs the threshold came from (0: none)
  int64_t realigned = 0;        // dropped sources kept with another dropped pair's target (in the kept files)
  double realign_threshold = 0.0;  // the score re-paired pairs are at most
  std::string summary() const;  // "kept 40 of 50 pairs (dropped 8 scoring above 1, 2 that could not ...)"
  // The rules the filter found, a line each: "--max-score 0.08, the 0.95 quantile of 1,014 reference
  // pairs' scores" (with reference pairs), "--length-quantile 0.002: ..." (with length bounds).
  std::vector<std::string> rules(const CorpusFilterOptions& options) const;
  // "3 pairs with a side longer than a model accepts, scored cut: lines ... of SRC and TGT"; "" when none.
  std::string truncation_warning(const std::string& src, const std::string& tgt) const;
  // Another part's report (of a corpus filtered in parts) added to this one: counts summed, the
  // thresholds the larger, the length bounds the wider.
  void add(const CorpusFilterReport& part);
};

// Filters options.src/tgt with `forward` (src -> tgt) and `backward` (tgt -> src) under `search`'s
// settings. Throws std::invalid_argument for bad options or a model in the wrong role (judged on
// the first pairs, both ways), std::runtime_error for a file that cannot be read or written or line
// counts that differ; nothing is written then. Progress by phase: `started(unit, total)` once at
// each phase's start ("pair scores": 2 x the pairs, -1 when unknown; with realign "translations"
// and "candidate scores"), then `progress(n)`: n more of that unit.
CorpusFilterReport filter_corpus(Translator& forward, Translator& backward, const TranslationOptions& search,
                                 const CorpusFilterOptions& options,
                                 const std::function<void(const std::string& unit, int64_t total)>& started = {},
                                 const std::function<void(int64_t n)>& progress = {});

}  // namespace torchmt
