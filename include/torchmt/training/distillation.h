#pragma once
// Sequence-level knowledge distillation (Kim and Rush, 2016) as one pipeline, `torchmt distill`:
//   1. the teachers (one model or an ensemble) translate the training sources with beam search into
//      <out>/teacher/ (train.<src>, train.<tgt>: a parallel corpus a user can read), a chunk at a
//      time, so that an interrupted run goes on where it stopped and a finished one is reused
//      while the teachers, the sources and the search stay the same;
//      With back_translate, teachers that translate both ways (trained with --both-directions) also
//      translate the training targets back into <out>/teacher/back/ (data diversification: each
//      original pair gives a pair with a translated target and one with a translated source);
//   2. a student (the train command's options) trains on the teachers' outputs, with the original
//      pairs too when asked, into <out>/student/; a later run resumes it;
//   3. <out>/shortlist.txt, the student's output vocabulary shortlist from the teachers' corpus,
//      for `translate --dtype int8 --shortlist` (the student offered as Marian's and Bergamot's are).
// A time budget (max_minutes) is the whole pipeline's: the student trains for what the teachers
// left of it.
#include <cstdint>
#include <string>

#include "torchmt/decoding/translation_options.h"
#include "torchmt/training/train_options.h"
#include "torchmt/training/trainer.h"
#include "torchmt/util/option_table.h"

namespace torchmt {

struct DistillOptions {
  // The teachers and their search: the translate command's options, named teacher_* (teacher_model
  // repeated: an ensemble). Beam 5, length penalty 1.5 unless told.
  TranslatorConfig teacher;
  // The student's training: the train command's options. `out` is the pipeline's directory;
  // `max_minutes` the whole pipeline's budget; train_src / train_tgt the original pairs (the
  // sources are what the teachers translate).
  TrainOptions student;
  bool with_originals = false;  // the student trains on the original pairs as well
  bool back_translate = false;  // the teachers translate the targets back too; the student learns from both
  int64_t chunk_lines = 2000;   // source lines translated between two saves of the teachers' corpus

  DistillOptions();
  // Throws std::invalid_argument naming the flag.
  void validate() const;
};

const OptionTable<DistillOptions>& distill_option_table();

struct DistillSummary {
  std::string teacher_src, teacher_tgt;  // the teachers' corpus
  bool teacher_reused = false;           // translated by an earlier run
  int64_t teacher_lines = 0;             // source lines translated (nbest hypotheses each)
  int64_t untranslated_lines = 0;        // empty, invalid UTF-8 or over 1 MB sources: an empty translation
  // With back_translate: the targets' translations (back_src) beside the targets (back_tgt), and
  // the target lines translated (untranslated ones counted in untranslated_lines too).
  std::string back_src, back_tgt;
  int64_t back_lines = 0;
  double teacher_seconds = 0;            // spent translating (both ways), over every run of the pipeline
  TrainSummary student;
  std::string shortlist;                 // built for the student; empty when interrupted before it
  bool interrupted = false;
};

// Runs the pipeline's steps that are not done yet. `hooks` as for Trainer::run: its stop request
// (signals or request_training_stop) ends the teachers' step after the chunk in flight and the
// student's as a training run ends; `on_progress` gets every line of both. Throws
// std::invalid_argument for bad options, std::runtime_error for bad input files.
DistillSummary distill(DistillOptions options, const TrainHooks& hooks = {});

}  // namespace torchmt
