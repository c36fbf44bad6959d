#pragma once
// RUN_DIR/metrics.csv (one row per validation) and RUN_DIR/curves.svg (losses and BLEU
// against steps), redrawn after every validation so a person can watch a run in a browser.
#include <limits>
#include <string>
#include <vector>

namespace torchmt {

struct ValidationRecord {
  int64_t step = 0;
  int64_t epoch = 0;
  double train_loss = 0;  // label-smoothed, per target token, since the previous row
  double valid_loss = 0;  // NLL per target token
  double valid_ppl = 0;
  double valid_bleu = 0;
  double tokens_per_sec = 0;  // target tokens, training only
  double wall_seconds = 0;    // since the run started (accumulated across resumes)
  double lr = 0;              // the learning rate of the last update
  double ema_bleu = std::numeric_limits<double>::quiet_NaN();  // of the moving average (--ema-decay), NaN when off
  double avg_bleu = std::numeric_limits<double>::quiet_NaN();  // of the average of the best (--average-best)
  std::string corpus_pairs;  // pairs drawn from each training corpus so far: "name=count;name=count"
};

class MetricsLog {
 public:
  // Reads existing rows (a resumed run keeps its history, rows after `resume_step` dropped).
  MetricsLog(const std::string& run_dir, int64_t resume_step);
  void add(const ValidationRecord& record);  // rewrites metrics.csv and curves.svg
  const std::vector<ValidationRecord>& records() const { return records_; }

 private:
  std::string csv_path_, svg_path_;
  std::vector<ValidationRecord> records_;
};

std::string render_curves_svg(const std::vector<ValidationRecord>& records);

}  // namespace torchmt
