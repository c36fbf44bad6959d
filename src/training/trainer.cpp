#include "torchmt/training/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include <torch/torch.h>

#include "training/label_smoothed_cross_entropy.h"
#include "util/split_mix.h"
#include "util/stop_signals.h"
#include "util/thread_team.h"
#include "training_run.h"

namespace torchmt {
namespace {

// The threads of the run's operations: --threads, else this machine's share for a worker of a
// data-parallel job, else 0 (the calling thread's as they are).
int training_threads(const TrainOptions& o, const DistributedEnv& env) {
  if (o.threads > 0) return static_cast<int>(o.threads);
  if (env.local_world_size <= 1) return 0;
  // This machine's workers share its cores: each takes its share, as torchrun sets
  // OMP_NUM_THREADS=1 per worker, rather than every worker spawning a thread per core.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<unsigned>(1, cores / static_cast<unsigned>(env.local_world_size)));
}

// A seed from (seed, update, rank) without collisions between nearby values (splitmix64's
// finaliser over each part in turn).
uint64_t mix_seed(uint64_t seed, uint64_t update, uint64_t rank) {
  uint64_t h = seed;
  for (uint64_t part : {update, rank}) h = mix64(h + part);
  return h;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TrainSummary TrainingRun::loop() {
  const int64_t world = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  TrainingScheduler scheduler(o_, model_config_.d_model, batcher_->batches_per_epoch(), world, position_, group_.get());
  TrainingStep step(model_, *optimizer_, LabelSmoothedCrossEntropy(o_.label_smoothing, model_config_.pad_id), device_,
                    dtype_, o_.clip_norm);
  step.distribute(reducer_.get(), group_.get());
  step.set_moe_aux_loss(o_.moe_aux_loss);
  step.set_rdrop(o_.rdrop_alpha);
  step.set_output_columns(model_->open_output_columns());  // the same on every rank: rank 0's weights
  int64_t bad_steps = 0;
  std::vector<Batch> batches;
  while (scheduler.keep_going(position_)) {
    const auto step_start = Clock::now();
    // Dropout's randomness under data parallelism: a function of (seed, update, rank), so a
    // resumed job draws what it would have drawn, whatever it was saved with.
    if (group_) torch::manual_seed(mix_seed(o_.seed, static_cast<uint64_t>(position_.step), static_cast<uint64_t>(rank)));
    const int64_t epoch_before = position_.epoch;
    if (batches.empty()) batches = next_batches();
    // Where the run stands after this update: what a checkpoint records.
    TrainingPosition after = position_;
    after.step += 1;
    after.epoch = batcher_->epoch();
    after.batch_index = batcher_->batch_index();
    last_lr_ = scheduler.lr(after.step);
    StepResult result = step.run(batches, last_lr_);
    // While the device works on this update, the next one's batches are read and copied
    // (pinned memory, asynchronous); then the one wait of the update, for its loss and norm.
    batches.clear();
    if (!scheduler.limit_reached(after) && !StopSignals::requested()) batches = next_batches();
    result.wait();
    position_.epoch = after.epoch;
    position_.batch_index = after.batch_index;
    if (!result.applied) {
      skip_update(after.step, result, ++bad_steps);
      continue;
    }
    bad_steps = 0;
    position_.step = after.step;
    position_.train_seconds = seconds_before_ + (train_seconds_ += seconds_since(step_start));
    const UpdateReport update = count_update(result, epoch_before, scheduler);
    if (auto plan = scheduler.after_update(position_, train_seconds_, summary_.steps)) log_.line(*plan);
    for (auto* observer : observers_) observer->on_update(update);

    const bool epoch_done = position_.epoch != epoch_before;
    if (epoch_done) summary_.epochs_completed += 1;
    if (scheduler.do_validate(position_, epoch_done)) validate_and_save(true);
  }
  end_run(scheduler);
  return summary_;
}

// A non-finite loss or gradient: the update was not applied; too many in a row end the run.
void TrainingRun::skip_update(int64_t step, const StepResult& result, int64_t bad_steps) {
  log_.line("step " + std::to_string(step) + " skipped: non-finite " + (std::isfinite(result.loss) ? "gradient" : "loss") +
            " (" + std::to_string(bad_steps) + " in a row)");
  if (bad_steps >= o_.max_bad_steps)
    throw std::runtime_error("training diverged: " + std::to_string(bad_steps) +
                             " non-finite steps in a row; the last good checkpoint is " + checkpoints_.last_path());
}

// An applied update into this process's totals, and the report its observers get.
UpdateReport TrainingRun::count_update(const StepResult& result, int64_t epoch_before,
                                       const TrainingScheduler& scheduler) {
  summary_.steps += 1;
  if (reducer_) allreduce_wait_ += reducer_->last_wait_seconds();
  total_tokens_ += result.tokens;
  window_.add(result.loss, result.tokens);
  summary_.last_train_loss = result.loss / static_cast<double>(std::max<int64_t>(1, result.tokens));
  UpdateReport update;
  update.step = position_.step;
  update.epoch = epoch_before;
  update.lr = last_lr_;
  update.loss_per_token = summary_.last_train_loss;
  update.tokens_per_second = total_tokens_ / train_seconds_;
  update.train_seconds = position_.train_seconds;
  update.eta_seconds = scheduler.eta_seconds(position_, train_seconds_ / static_cast<double>(summary_.steps));
  return update;
}

// An update reads world x update_freq batches of the one global order; rank r takes every
// world-th from the r-th, so N workers see what one worker with --update-freq N sees.
std::vector<Batch> TrainingRun::next_batches() {
  const int64_t world = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  std::vector<Batch> batches;
  for (int64_t i = 0; i < o_.update_freq * world; ++i) {
    if (i % world == rank)
      batches.push_back(batcher_->next(device_));
    else
      batcher_->skip();
  }
  return batches;
}

void TrainingRun::wait_for_rank0() {
  if (group_) group_->barrier();
}

void TrainingRun::validate_and_save(bool validate) {
  if (!rank0_) {
    wait_for_rank0();  // rank 0 validates and writes for the job
    return;
  }
  SaveReport save;
  save.numbered = validate;
  save.best = validator_ ? BestWeights::kNone : BestWeights::kWeights;  // without validation every save is the best
  std::vector<at::Tensor> best_average;  // the --average-best weights, when they win
  if (validate && validator_) {
    const ValidationReport report = this->validate(best_average);
    for (auto* observer : observers_) observer->on_validation(report);
    summary_.last_bleu = report.scores.bleu;
    summary_.last_valid_loss = report.scores.loss;
    window_ = LossWindow{};
    last_validated_step_ = position_.step;
    save.best = report.best;
    save.best_average = &best_average;
  }
  for (auto* observer : observers_) observer->on_save(save);
  wait_for_rank0();
}

// The weights, their moving average and the average of the best validations' weights, each
// validated; the one that scores highest becomes the best when it beats the best so far.
ValidationReport TrainingRun::validate(std::vector<at::Tensor>& best_average) {
  ValidationReport r;
  r.scores = validator_->run(model_, runtime_);
  if (ema_) {
    ScopedWeights swap(ema_->params(), ema_->average());
    r.moving_average = validator_->run(model_, runtime_);
  }
  std::vector<at::Tensor> top_average;
  if (o_.average_best > 1 && checkpoints_.offer_top(model_, meta_, r.scores.bleu, o_.average_best) &&
      checkpoints_.top_paths().size() >= 2) {
    LoadedCheckpoint averaged = average_checkpoints(checkpoints_.top_paths());
    for (auto& t : unique_parameters(*averaged.model)) top_average.push_back(t.to(device_));
    ScopedWeights swap(unique_parameters(*model_), top_average);
    r.best_average = validator_->run(model_, runtime_);
  }
  BestWeights winner = BestWeights::kWeights;
  const ValidationScores* chosen = &r.scores;
  for (auto [candidate, s] : {std::pair{BestWeights::kMovingAverage, &r.moving_average},
                              std::pair{BestWeights::kBestAverage, &r.best_average}}) {
    if (*s && Validator::improves(**s, chosen->bleu, chosen->loss)) {
      chosen = &**s;
      winner = candidate;
    }
  }
  if (Validator::improves(*chosen, position_.best_bleu, position_.best_loss)) {
    position_.best_bleu = chosen->bleu;
    position_.best_loss = chosen->loss;
    r.best = winner;
    if (winner == BestWeights::kBestAverage) best_average = std::move(top_average);
  }
  ValidationRecord& rec = r.record;
  rec.step = position_.step;
  rec.epoch = position_.epoch;
  rec.train_loss = window_.mean();
  rec.valid_loss = r.scores.loss;
  rec.valid_ppl = r.scores.ppl;
  rec.valid_bleu = r.scores.bleu;
  rec.tokens_per_sec = train_seconds_ > 0 ? total_tokens_ / train_seconds_ : 0;
  rec.wall_seconds = seconds_before_ + std::chrono::duration<double>(Clock::now() - run_start_).count();
  rec.lr = last_lr_;
  if (r.moving_average) rec.ema_bleu = r.moving_average->bleu;
  if (r.best_average) rec.avg_bleu = r.best_average->bleu;
  const std::vector<int64_t> drawn = batcher_->drawn_pairs(position_.epoch, position_.batch_index);
  rec.corpus_pairs = corpora_->counts_field(drawn);
  if (corpora_->shares().size() > 1) r.corpora_drawn = corpora_->counts_text(drawn);
  return r;
}

// Interrupted (a signal here or at another rank): save where the run stands. Ended at a limit:
// validate once more unless the last update was.
void TrainingRun::end_run(const TrainingScheduler& scheduler) {
  const auto ending = scheduler.ending(position_, last_validated_step_);
  summary_.interrupted = ending.interrupted;
  if (ending.interrupted) {
    log_.line("interrupted: saving " + checkpoints_.last_path());
    validate_and_save(false);
  } else if (ending.validate) {
    validate_and_save(true);
  }
  if (reducer_ && summary_.steps > 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "data parallel: %.1f ms per update waiting for the gradient all-reduce after backward (%.1f%% of "
                  "the update; %.0f KiB per update)",
                  1000 * allreduce_wait_ / static_cast<double>(summary_.steps),
                  train_seconds_ > 0 ? 100 * allreduce_wait_ / train_seconds_ : 0.0,
                  static_cast<double>(reducer_->bytes()) / 1024);
    log_.line(buf);
  }
  summary_.train_seconds = position_.train_seconds;
  summary_.tokens_per_sec = train_seconds_ > 0 ? total_tokens_ / train_seconds_ : 0;
  summary_.best_bleu = position_.best_bleu;
  summary_.best_checkpoint = checkpoints_.best_path();
  summary_.reporting = rank0_;
}

void request_training_stop() { StopSignals::request(); }

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) { options_.validate(); }

TrainSummary Trainer::run(const TrainHooks& hooks) {
  // From here on a stop request (SIGINT/SIGTERM where asked) ends the run with a checkpoint.
  StopSignals signals(hooks.stop_on_signals);
  // The calling thread's team for the run, put back after: never the process's count.
  const int threads = training_threads(options_, DistributedEnv::from_environment());
  std::optional<ScopedThreadTeam> team;
  if (threads > 0) team.emplace(threads);
  std::optional<RuntimeScope> kernels;  // this thread's kernels (and its parallel loops')
  if (hooks.runtime) kernels.emplace(*hooks.runtime);
  try {
    TrainingRun run(options_, hooks);
    return run.loop();
  } catch (const StopRequested& e) {
    // Set-up ended early: no step was made, nothing to save; what it had begun is removed.
    TrainSummary summary;
    summary.interrupted = true;
    return summary;
  }
}

}  // namespace torchmt
