#include "training_observers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "torchmt/util/strings.h"

namespace torchmt {

ProgressObserver::ProgressObserver(int64_t log_every, bool quiet, std::function<void(int64_t, const std::string&)> hook)
    : progress_(quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto),
      quiet_(quiet),
      log_every_(log_every),
      hook_(std::move(hook)) {}

void ProgressObserver::line(const std::string& text) {
  if (quiet_) return;
  if (hook_) hook_(-1, text);
  progress_.line(text);
}

void ProgressObserver::on_update(const UpdateReport& u) {
  if (quiet_) return;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "epoch %lld | step %lld | loss %.3f | ppl %.1f | lr %.2e | %.0f tok/s | %s%s%s",
                static_cast<long long>(u.epoch), static_cast<long long>(u.step), u.loss_per_token,
                std::exp(std::min(50.0, u.loss_per_token)), u.lr, u.tokens_per_second,
                clock_text(u.train_seconds).c_str(), u.eta_seconds >= 0 ? " | ETA " : "",
                u.eta_seconds >= 0 ? clock_text(u.eta_seconds).c_str() : "");
  if (hook_) hook_(u.step, buf);
  progress_.status(buf, u.step % log_every_ == 0);
}

void ProgressObserver::on_validation(const ValidationReport& v) {
  if (!v.corpora_drawn.empty()) line("corpora drawn so far: " + v.corpora_drawn);
  const ValidationScores& s = v.scores;
  char buf[320];
  std::snprintf(buf, sizeof(buf), "valid | epoch %lld | step %lld | loss %.3f | ppl %.2f | BLEU %.2f%s | %.1f s",
                static_cast<long long>(v.record.epoch), static_cast<long long>(v.record.step), s.loss, s.ppl, s.bleu,
                v.best == BestWeights::kWeights ? " (best)" : "", s.seconds);
  std::string text = buf;
  for (auto [kind, name, scores] : {std::tuple{BestWeights::kMovingAverage, "moving average", &v.moving_average},
                                    std::tuple{BestWeights::kBestAverage, "average of the best", &v.best_average}}) {
    if (!*scores) continue;
    std::snprintf(buf, sizeof(buf), " | %s: loss %.3f, BLEU %.2f%s", name, (*scores)->loss, (*scores)->bleu,
                  v.best == kind ? " (best)" : "");
    text += buf;
  }
  line(text);
}

void CheckpointObserver::on_save(const SaveReport& s) {
  checkpoints_.save(model_, &optimizer_, meta_, s.best == BestWeights::kWeights, s.numbered);
  if (s.best != BestWeights::kMovingAverage && s.best != BestWeights::kBestAverage) return;
  ScopedWeights swap(unique_parameters(*model_), s.best == BestWeights::kMovingAverage ? ema_->average() : *s.best_average);
  checkpoints_.save_best(model_, meta_);
}

}  // namespace torchmt
