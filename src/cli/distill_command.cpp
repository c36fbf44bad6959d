// torchmt distill: flags and/or a config file -> DistillOptions -> distill() (training/distillation.h).
#include <cstdio>
#include <iostream>

#include "training_command.h"
#include "util/heap.h"
#include "torchmt/training/distillation.h"
#include "torchmt/util/strings.h"

namespace torchmt::cli {
namespace {

int run_distill(int argc, char** argv) {
  const auto& table = distill_option_table();
  int code = kExitOk;
  auto line = parse_command_line(
      "Sequence-level distillation: the teachers (--teacher-model, repeated: an ensemble) translate the training\n"
      "sources with beam search into OUT/teacher/ (--back-translate: the targets too, into OUT/teacher/back/), a\n"
      "student (the train command's options) trains on their translations into OUT/student/, and\n"
      "OUT/shortlist.txt lets it translate in int8 with a shortlist.\n"
      "A run that stopped goes on where it stopped; --max-minutes is the whole pipeline's budget.",
      table.rows(), argc, argv, code);
  if (!line) return code;
  auto options = read_training_options(table, *line, argv[0], code);
  if (!options) return code;
  use_heap_policy(options->teacher.translation);
  // SIGINT/SIGTERM: the teachers' corpus or the student saved, exit 0
  auto hooks = training_process_hooks(argv[0], code);
  if (!hooks) return code;
  const DistillSummary s = distill(*options, *hooks);
  if (s.interrupted) {
    std::cerr << "interrupted: run the same command again to go on\n";
    return kExitOk;
  }
  char bleu[64] = "";
  if (s.student.best_bleu >= 0) std::snprintf(bleu, sizeof(bleu), ", best validation BLEU %.2f", s.student.best_bleu);
  const std::string model = s.student.best_checkpoint.empty() ? options->student.out + "/student/checkpoint_last.pt"
                                                              : s.student.best_checkpoint;
  std::cerr << "done: teachers " << with_thousands(s.teacher_lines) << " lines"
            << (options->back_translate ? " and " + with_thousands(s.back_lines) + " back" : std::string()) << " in "
            << clock_text(s.teacher_seconds)
            << (s.teacher_reused ? " (an earlier run's)" : "") << "; student " << s.student.steps
            << " steps in this run, " << static_cast<int64_t>(s.student.train_seconds) << " s of training"
            << bleu << "\n"
            << "translate with: torchmt translate -m " << model << " --dtype int8 --shortlist " << s.shortlist
            << "\n";
  return kExitOk;
}

const CommandRegistration distill_registration(
    {"distill", "train a small student on a teacher's translations (sequence-level distillation)", run_distill, 25});

}  // namespace
}  // namespace torchmt::cli
