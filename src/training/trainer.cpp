#include "torchmt/training/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include <torch/torch.h>

#include "torchmt/data/parallel_corpus.h"
#include "torchmt/data/special_ids.h"
#include "torchmt/data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/training/adam_optimizer.h"
#include "torchmt/training/checkpoint_manager.h"
#include "torchmt/training/inverse_sqrt_schedule.h"
#include "torchmt/training/label_smoothed_cross_entropy.h"
#include "torchmt/training/metrics_log.h"
#include "torchmt/training/stop_criteria.h"
#include "torchmt/training/training_step.h"
#include "torchmt/training/validator.h"
#include "torchmt/util/device.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/file_lock.h"
#include "torchmt/util/integrity.h"
#include "torchmt/util/stop_signals.h"

namespace fs = std::filesystem;

namespace torchmt {
namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%02lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

ModelConfig build_model_config(const TrainOptions& o, int64_t vocab_size, bool joint_vocab) {
  ModelConfig c = ModelConfig::preset(o.preset);
  c.src_vocab_size = c.tgt_vocab_size = vocab_size;
  if (o.d_model > 0) c.d_model = o.d_model;
  if (o.num_heads > 0) c.num_heads = o.num_heads;
  if (o.encoder_layers > 0) c.num_encoder_layers = o.encoder_layers;
  if (o.decoder_layers > 0) c.num_decoder_layers = o.decoder_layers;
  if (o.d_ff > 0) c.d_ff = o.d_ff;
  if (o.dropout >= 0) c.dropout = o.dropout;
  if (!o.activation.empty()) c.activation = parse_activation(o.activation);
  if (o.tie_embeddings == "true") c.tie_embeddings = true;
  if (o.tie_embeddings == "false") c.tie_embeddings = false;
  if (c.tie_embeddings && !joint_vocab) throw std::invalid_argument("--tie-embeddings needs a joint vocabulary");
  c.max_positions = std::max(c.max_positions, o.max_sentence_tokens + 2);
  c.pad_id = kPadId;
  c.validate();
  return c;
}

class Progress {
 public:
  explicit Progress(int64_t log_every) : tty_(::isatty(STDERR_FILENO) == 1), log_every_(log_every) {}
  void update(int64_t step, const std::string& text) {
    if (tty_) {
      std::cerr << "\r\033[K" << text << std::flush;
      dirty_ = true;
    } else if (step % log_every_ == 0) {
      std::cerr << text << "\n";
    }
  }
  void line(const std::string& text) {
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
    std::cerr << text << "\n";
  }

 private:
  bool tty_;
  int64_t log_every_;
  bool dirty_ = false;
};

// The joint BPE model: the given one, or one trained into the run directory (once).
std::string ensure_tokenizer(const TrainOptions& o, Progress& progress) {
  if (!o.spm.empty()) return o.spm;
  const std::string path = o.out + "/spm.model";
  if (fs::exists(path)) return path;
  progress.line("training a joint " + std::to_string(o.vocab_size) + " BPE vocabulary -> " + path);
  VocabTrainingOptions v;
  v.inputs = {o.train_src, o.train_tgt};
  v.model_prefix = o.out + "/spm";
  v.vocab_size = static_cast<int>(o.vocab_size);
  v.seed = static_cast<uint32_t>(o.seed);
  train_bpe_vocab(v);
  return path;
}

// Creates the run directory and applies the thread count; refuses to overwrite a run or to
// resume nothing. Returns `o`.
const TrainOptions& prepare_run_directory(const TrainOptions& o) {
  fs::create_directories(o.out);
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const std::string last = CheckpointManager(o.out, o.keep_last).last_path();
  if (o.resume && !fs::exists(last)) throw std::runtime_error("--resume: no checkpoint to resume at " + last);
  if (!o.resume && fs::exists(last))
    throw std::runtime_error("run directory " + o.out +
                             " already holds a checkpoint; pass --resume or choose another --out");
  return o;
}

// Label-smoothed training loss per target token since the last validation.
struct LossWindow {
  double loss = 0;
  int64_t tokens = 0;
  void add(double l, int64_t t) {
    loss += l;
    tokens += t;
  }
  double mean() const { return tokens > 0 ? loss / static_cast<double>(tokens) : 0; }
};

// One `torchmt train` invocation: the constructor builds everything the run trains with
// (tokenizer, corpora, validator, model, optimiser, batches) and restores it on --resume;
// loop() runs updates until a StopCriteria limit or a signal, validating and saving as due.
class TrainingRun {
 public:
  explicit TrainingRun(const TrainOptions& options);
  TrainSummary loop();

 private:
  using Clock = std::chrono::steady_clock;
  // Validates (when asked and there is a validation set), then saves: last always, best when
  // validation improved (or there is none), numbered after a validation.
  void validate_and_save(bool validate);
  void log_update(int64_t epoch, double lr, double eta);

  const TrainOptions& o_;
  FileLock run_lock_;  // one writer per run directory, from here to the end of the run
  Progress progress_;
  c10::Device device_;
  c10::ScalarType dtype_;
  CheckpointManager checkpoints_;
  std::string spm_path_;
  Tokenizer tokenizer_;
  EncodedCorpus train_;
  std::optional<Validator> validator_;
  ModelConfig model_config_;
  Transformer model_{nullptr};
  std::unique_ptr<AdamOptimizer> optimizer_;
  std::unique_ptr<TokenBatcher> batcher_;  // points into train_
  std::unique_ptr<MetricsLog> metrics_;
  CheckpointMeta meta_;
  TrainingPosition& position_ = meta_.position;
  // This process's progress.
  TrainSummary summary_;
  double seconds_before_ = 0;  // training time of earlier runs (resume)
  double train_seconds_ = 0;   // this process, training steps only
  int64_t total_tokens_ = 0, last_validated_step_ = -1;
  LossWindow window_;
  Clock::time_point run_start_ = Clock::now();
};

TrainingRun::TrainingRun(const TrainOptions& o)
    : o_(prepare_run_directory(o)),
      run_lock_(o.out + "/train.lock", "run directory " + o.out),
      progress_(o.log_every),
      device_(resolve_device(o.device)),
      dtype_(resolve_dtype(o.dtype, device_)),
      checkpoints_(o.out, o.keep_last),
      spm_path_(ensure_tokenizer(o, progress_)),
      tokenizer_(Tokenizer::load(spm_path_)) {
  // Corpora (encoded once, then cached next to the run).
  CorpusOptions corpus_options;
  corpus_options.max_sentence_tokens = o.max_sentence_tokens;
  corpus_options.cache_dir = o.out + "/cache";
  const auto t0 = Clock::now();
  train_ = load_parallel_corpus(o.train_src, o.train_tgt, tokenizer_, tokenizer_, corpus_options);
  progress_.line("train: " + train_.stats.summary() + (train_.from_cache ? " (cached)" : "") + " in " +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
  if (train_.pairs.empty()) throw std::runtime_error("no training pairs left after filtering " + o.train_src);
  if (!o.valid_src.empty()) {
    validator_.emplace(o.valid_src, o.valid_tgt, tokenizer_, corpus_options, o.batch_tokens, o.valid_batch_size,
                       device_, dtype_);
    progress_.line("valid: " + validator_->summary());
  }

  // Model, optimiser, batches.
  model_config_ = build_model_config(o, tokenizer_.vocab_size(), true);
  torch::manual_seed(o.seed);
  model_ = Transformer(model_config_);
  model_->to(device_);
  optimizer_ = std::make_unique<AdamOptimizer>(unique_parameters(*model_), AdamOptions{});
  BatcherOptions batcher_options;
  batcher_options.batch_tokens = o.batch_tokens;
  batcher_options.seed = o.seed;
  batcher_ = std::make_unique<TokenBatcher>(train_, batcher_options);

  meta_.model = model_config_;
  meta_.train_config = o.to_config().to_yaml();
  meta_.src_spm_path = meta_.tgt_spm_path = fs::absolute(spm_path_).string();
  meta_.src_spm_checksum = meta_.tgt_spm_checksum = tokenizer_.checksum();
  meta_.src_spm_model = tokenizer_.serialized();
  if (const int64_t stale = checkpoints_.remove_stale_temporaries(); stale > 0)
    progress_.line("removed " + std::to_string(stale) + " temporary file(s) left by an interrupted run in " + o.out);
  if (o.resume) {
    // checkpoint_last.pt, or when it is damaged the newest numbered checkpoint that verifies.
    std::vector<std::string> candidates = checkpoints_.numbered();
    candidates.push_back(checkpoints_.last_path());
    std::string resumed_from, damage;
    CheckpointMeta saved;
    for (auto it = candidates.rbegin(); it != candidates.rend() && resumed_from.empty(); ++it) {
      try {
        saved = restore_training_state(*it, model_, optimizer_->state());
        resumed_from = *it;
      } catch (const DamagedFileError& e) {
        if (damage.empty()) damage = e.what();
      }
    }
    if (resumed_from.empty()) throw DamagedFileError(damage + "; no numbered checkpoint verifies either");
    if (!damage.empty()) progress_.line("warning: " + damage + ": resuming from " + resumed_from + " instead");
    if (saved.src_spm_checksum != tokenizer_.checksum())
      throw std::runtime_error("--resume: tokenizer " + spm_path_ + " differs from the one the run started with");
    position_ = saved.position;
    batcher_->seek(position_.epoch, position_.batch_index);
    progress_.line("resumed " + resumed_from + " at step " + std::to_string(position_.step) +
                   ", epoch " + std::to_string(position_.epoch) + " batch " + std::to_string(position_.batch_index));
  }
  seconds_before_ = position_.train_seconds;
  atomic_write(o.out + "/config.yaml",
               seal_text("# effective configuration of this run (torchmt train --config " + o.out +
                         "/config.yaml); the last line is its checksum: delete it after editing by hand\n" +
                         meta_.train_config));
  progress_.line("model " + o.preset + ": " + std::to_string(count_parameters(model_)) + " parameters, " +
                 std::to_string(batcher_->batches_per_epoch()) + " batches/epoch (padding " +
                 std::to_string(100 * batcher_->padding_fraction()).substr(0, 4) + "%), device " + device_.str() +
                 ", " + dtype_name(dtype_) + ", " + std::to_string(torch::get_num_threads()) + " threads");
  metrics_ = std::make_unique<MetricsLog>(o.out, position_.step);
}

void TrainingRun::validate_and_save(bool validate) {
  bool best = !validator_;
  if (validate && validator_) {
    const ValidationScores scores = validator_->run(model_);
    best = Validator::improves(scores, position_.best_bleu, position_.best_loss);
    if (best) {
      position_.best_bleu = scores.bleu;
      position_.best_loss = scores.loss;
    }
    ValidationRecord rec;
    rec.step = position_.step;
    rec.epoch = position_.epoch;
    rec.train_loss = window_.mean();
    rec.valid_loss = scores.loss;
    rec.valid_ppl = scores.ppl;
    rec.valid_bleu = scores.bleu;
    rec.tokens_per_sec = train_seconds_ > 0 ? total_tokens_ / train_seconds_ : 0;
    rec.wall_seconds = seconds_before_ + std::chrono::duration<double>(Clock::now() - run_start_).count();
    metrics_->add(rec);
    summary_.last_bleu = scores.bleu;
    summary_.last_valid_loss = scores.loss;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "valid | epoch %lld | step %lld | loss %.3f | ppl %.2f | BLEU %.2f%s | %.1f s",
                  static_cast<long long>(rec.epoch), static_cast<long long>(rec.step), scores.loss, scores.ppl,
                  scores.bleu, best ? " (best)" : "", scores.seconds);
    progress_.line(buf);
    window_ = LossWindow{};
    last_validated_step_ = position_.step;
  }
  checkpoints_.save(model_, &optimizer_->state(), meta_, best, validate);
}

TrainSummary TrainingRun::loop() {
  const StopCriteria stop({o_.max_steps, o_.max_epochs, o_.max_minutes}, batcher_->batches_per_epoch(),
                          o_.update_freq);
  const InverseSqrtSchedule schedule(o_.lr_factor, model_config_.d_model, o_.warmup);
  TrainingStep step(model_, *optimizer_, LabelSmoothedCrossEntropy(o_.label_smoothing, kPadId), device_, dtype_,
                    o_.clip_norm);
  int64_t bad_steps = 0;
  auto next_batches = [&] {
    std::vector<Batch> batches;
    for (int64_t micro = 0; micro < o_.update_freq; ++micro) batches.push_back(batcher_->next(device_));
    return batches;
  };
  std::vector<Batch> batches;
  while (!stop.reached(position_) && !StopSignals::requested()) {
    const auto step_start = Clock::now();
    const int64_t epoch_before = position_.epoch;
    if (batches.empty()) batches = next_batches();
    // Where the batcher stands after this update's batches: what a checkpoint records.
    const int64_t epoch_after = batcher_->epoch(), batch_index_after = batcher_->batch_index();
    const double lr = schedule.lr(position_.step + 1);
    StepResult result = step.run(batches, lr);
    // While the device works on this update, the next one's batches are read and copied
    // (pinned memory, asynchronous); then the one wait of the update, for its loss and norm.
    batches.clear();
    TrainingPosition ahead = position_;
    ahead.step += 1;
    ahead.epoch = epoch_after;
    ahead.batch_index = batch_index_after;
    if (!stop.reached(ahead) && !StopSignals::requested()) batches = next_batches();
    result.wait();
    if (!result.applied) {
      ++bad_steps;
      progress_.line("step " + std::to_string(position_.step + 1) + " skipped: non-finite " +
                     (std::isfinite(result.loss) ? "gradient" : "loss") + " (" + std::to_string(bad_steps) +
                     " in a row)");
      if (bad_steps >= o_.max_bad_steps)
        throw std::runtime_error("training diverged: " + std::to_string(bad_steps) +
                                 " non-finite steps in a row; the last good checkpoint is " + checkpoints_.last_path());
      position_.epoch = epoch_after;
      position_.batch_index = batch_index_after;
      continue;
    }
    bad_steps = 0;
    position_.step += 1;
    position_.epoch = epoch_after;
    position_.batch_index = batch_index_after;
    summary_.steps += 1;
    train_seconds_ += std::chrono::duration<double>(Clock::now() - step_start).count();
    position_.train_seconds = seconds_before_ + train_seconds_;
    total_tokens_ += result.tokens;
    window_.add(result.loss, result.tokens);
    summary_.last_train_loss = result.loss / static_cast<double>(std::max<int64_t>(1, result.tokens));
    const double eta = stop.eta_seconds(position_, train_seconds_ / static_cast<double>(summary_.steps));
    log_update(epoch_before, lr, eta);

    const bool epoch_done = epoch_after != epoch_before;
    if (epoch_done) summary_.epochs_completed += 1;
    if (o_.validate_every > 0 ? position_.step % o_.validate_every == 0 : epoch_done) validate_and_save(true);
  }
  summary_.interrupted = StopSignals::requested();
  if (summary_.interrupted) {
    progress_.line("interrupted: saving " + checkpoints_.last_path());
    validate_and_save(false);
  } else if (last_validated_step_ != position_.step) {
    validate_and_save(true);  // once more when training ends
  }
  summary_.train_seconds = position_.train_seconds;
  summary_.tokens_per_sec = train_seconds_ > 0 ? total_tokens_ / train_seconds_ : 0;
  summary_.best_bleu = position_.best_bleu;
  summary_.best_checkpoint = checkpoints_.best_path();
  return summary_;
}

void TrainingRun::log_update(int64_t epoch, double lr, double eta) {
  const double token_loss = summary_.last_train_loss;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "epoch %lld | step %lld | loss %.3f | ppl %.1f | lr %.2e | %.0f tok/s | %s%s%s",
                static_cast<long long>(epoch), static_cast<long long>(position_.step), token_loss,
                std::exp(std::min(50.0, token_loss)), lr, total_tokens_ / train_seconds_,
                clock_text(position_.train_seconds).c_str(), eta >= 0 ? " | ETA " : "",
                eta >= 0 ? clock_text(eta).c_str() : "");
  progress_.update(position_.step, buf);
}

}  // namespace

void request_training_stop() { StopSignals::request(); }

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) { options_.validate(); }

TrainSummary Trainer::run() {
  StopSignals signals;  // from here on SIGINT/SIGTERM end the run with a checkpoint
  TrainingRun run(options_);
  return run.loop();
}

}  // namespace torchmt
