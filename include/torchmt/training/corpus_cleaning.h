#pragma once
// Cleaning a corpus with no trusted models, `torchmt clean`: dual conditional cross-entropy
// (evaluation/corpus_filter.h) under models trained on the corpus itself, cross-fitted. Models
// that learned a pair, noise included, find it probable (a de->en and an en->de model trained on
// tools/bench/filter_noise.py's corrupted corpus removed 11% of its corrupted pairs), so:
//   1. the corpus is cut into `folds` parts of consecutive lines, <out>/fold<k>/part.<src|tgt>, and
//      each part's complement written beside it (rest.<src|tgt>);
//   2. for each part a forward and a backward model (the train command's options) train on the
//      complement, into <out>/fold<k>/forward and backward: a model never scores a pair it learned;
//      an interrupted run resumes the training in flight, a finished one is reused;
//   3. each part is filtered by its own two models (the filter's options; the threshold, unless
//      given, the validation pairs' quantile), and the parts' outputs joined into the filter's
//      files, numbered as lines of the whole corpus.
// With rounds > 1 each later round trains its models on the pairs the round before kept (the other
// parts' kept files, <out>/round<r>/fold<k>/rest.*) and filters every part again: models that saw
// less noise score it as less probable.
// One vocabulary for every model: --spm, else one trained on the whole corpus (<out>/spm.model).
// A time budget (max_minutes) is the whole pipeline's, shared by the trainings still to run.
#include <cstdint>
#include <string>
#include <vector>

#include "torchmt/evaluation/corpus_filter.h"
#include "torchmt/training/train_options.h"
#include "torchmt/training/trainer.h"
#include "torchmt/util/option_table.h"

namespace torchmt {

struct CleanOptions {
  // The corpus (src, tgt), the outputs and the threshold: the filter command's options, contrasted
  // unless told otherwise (models trained on the noisy corpus find any fluent side probable; with
  // the contrast one round removed 98.9% of filter_noise.py's corrupted pairs, without it 67.7%),
  // at the reference pairs' 0.97 quantile: held-out training pairs score a little worse than the
  // validation pairs under these models, and 0.95 dropped 6.01% of that corpus's clean pairs (0.97
  // with the length bounds: 4.89%, removing 99.4% of the corrupted).
  CorpusFilterOptions filter = [] {
    CorpusFilterOptions f;
    f.contrast = true;
    f.reference_quantile = 0.97;
    return f;
  }();
  // Every model's training: the train command's options but the corpus (the parts' complements);
  // `out` is the pipeline's directory, `max_minutes` the whole pipeline's budget.
  TrainOptions training;
  int64_t folds = 2;
  int64_t rounds = 1;

  // Throws std::invalid_argument naming the flag.
  void validate() const;
};

const OptionTable<CleanOptions>& clean_option_table();

struct CleanSummary {
  CorpusFilterReport report;             // the last round's parts' reports added up (threshold: the largest)
  std::vector<double> thresholds;        // each part's, in the last round
  int64_t trained = 0, reused = 0;       // models trained (or resumed) by this run, and finished by an earlier one
  double train_seconds = 0;              // this run's training
  bool interrupted = false;              // a training stopped by a signal; the next run resumes it
};

// Runs the steps not done yet. `hooks` as for Trainer::run (stop_on_signals: a SIGINT ends the
// training in flight with a checkpoint); `on_progress` gets the pipeline's own lines too. Throws
// std::invalid_argument for bad options, std::runtime_error for bad input files (nothing trained).
CleanSummary clean_corpus(CleanOptions options, const TrainHooks& hooks = {});

}  // namespace torchmt
