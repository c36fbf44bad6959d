#pragma once
// The checkpoints of a run directory (fairseq's checkpoint_utils, Marian's "save" step):
// checkpoint_last.pt at every save (what --resume continues), checkpoint_best.pt when
// validation improved (weights and metadata only: for translating, exporting, averaging), checkpoint_<step>.pt after each validation with only the newest
// `keep_last` kept. Every file is written atomically: a kill leaves the previous one.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/checkpoint.h"

namespace torchmt {

class CheckpointManager {
 public:
  CheckpointManager(std::string run_dir, int64_t keep_last);
  std::string last_path() const { return run_dir_ + "/checkpoint_last.pt"; }
  std::string best_path() const { return run_dir_ + "/checkpoint_best.pt"; }
  // Writes checkpoint_last.pt; checkpoint_best.pt (without `optimizer`) when `best` and, when
  // `numbered` and keep_last > 0, to checkpoint_<step>.pt, then removes the oldest
  // numbered checkpoints beyond keep_last.
  void save(const Transformer& model, const OptimizerState* optimizer, const CheckpointMeta& meta, bool best,
            bool numbered);
  // checkpoint_best.pt alone (weights and metadata): for weights other than the ones training
  // goes on with (the moving average).
  void save_best(const Transformer& model, const CheckpointMeta& meta);
  // --average-best: the weights of the `keep` validations with the highest BLEU, as
  // top_<step>.pt (weights and metadata). Adds these weights when they rank among the `keep`
  // best (removing the one they push out) and returns whether they did.
  bool offer_top(const Transformer& model, const CheckpointMeta& meta, double bleu, int64_t keep);
  std::vector<std::string> top_paths() const;
  // After a resume: the top_<step>.pt files there, ranked by the BLEU each step had (a file
  // whose step has none, or is after the resumed position, is removed).
  void recall_top(const std::vector<std::pair<int64_t, double>>& step_bleu);
  // The numbered checkpoints in the run directory, oldest step first.
  std::vector<std::string> numbered() const;
  // Removes the temporary files (NAME.tmp.XXXXXX) a killed writer left in the run directory;
  // returns how many. Only while holding the run's lock: a live writer's file looks the same.
  int64_t remove_stale_temporaries() const;

 private:
  std::string top_path(int64_t step) const { return run_dir_ + "/top_" + std::to_string(step) + ".pt"; }
  std::string run_dir_;
  int64_t keep_last_;
  std::vector<std::pair<double, int64_t>> top_;  // (BLEU, step), best first
};

}  // namespace torchmt
