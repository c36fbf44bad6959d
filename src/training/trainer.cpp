#include "torchmt/training/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
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

namespace fs = std::filesystem;

namespace torchmt {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_stop_signal(int) { g_stop.store(true); }

// Installs SIGINT/SIGTERM handlers for the trainer's lifetime.
class StopSignals {
 public:
  StopSignals() {
    g_stop.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

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

}  // namespace

void request_training_stop() { g_stop.store(true); }

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) { options_.validate(); }

TrainSummary Trainer::run() {
  const TrainOptions& o = options_;
  using Clock = std::chrono::steady_clock;
  Progress progress(o.log_every);
  StopSignals signals;  // from here on SIGINT/SIGTERM end the run with a checkpoint
  fs::create_directories(o.out);
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const c10::Device device = resolve_device(o.device);
  const c10::ScalarType dtype = resolve_dtype(o.dtype, device);
  CheckpointManager checkpoints(o.out, o.keep_last);
  if (o.resume && !fs::exists(checkpoints.last_path()))
    throw std::runtime_error("--resume: no checkpoint to resume at " + checkpoints.last_path());
  if (!o.resume && fs::exists(checkpoints.last_path()))
    throw std::runtime_error("run directory " + o.out +
                             " already holds a checkpoint; pass --resume or choose another --out");

  const std::string spm_path = ensure_tokenizer(o, progress);
  const Tokenizer tokenizer = Tokenizer::load(spm_path);

  // Corpora (encoded once, then cached next to the run).
  CorpusOptions corpus_options;
  corpus_options.max_sentence_tokens = o.max_sentence_tokens;
  corpus_options.cache_dir = o.out + "/cache";
  const auto t0 = Clock::now();
  const EncodedCorpus train = load_parallel_corpus(o.train_src, o.train_tgt, tokenizer, tokenizer, corpus_options);
  progress.line("train: " + train.stats.summary() + (train.from_cache ? " (cached)" : "") + " in " +
                std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
  if (train.pairs.empty()) throw std::runtime_error("no training pairs left after filtering " + o.train_src);
  std::optional<Validator> validator;
  if (!o.valid_src.empty()) {
    validator.emplace(o.valid_src, o.valid_tgt, tokenizer, corpus_options, o.batch_tokens, o.valid_batch_size, device,
                      dtype);
    progress.line("valid: " + validator->summary());
  }

  // Model, optimiser, schedule, batches.
  const ModelConfig model_config = build_model_config(o, tokenizer.vocab_size(), true);
  torch::manual_seed(o.seed);
  Transformer model(model_config);
  model->to(device);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  InverseSqrtSchedule schedule(o.lr_factor, model_config.d_model, o.warmup);
  BatcherOptions batcher_options;
  batcher_options.batch_tokens = o.batch_tokens;
  batcher_options.seed = o.seed;
  TokenBatcher batcher(train, batcher_options);

  CheckpointMeta meta;
  meta.model = model_config;
  meta.train_config = o.to_config().to_yaml();
  meta.src_spm_path = meta.tgt_spm_path = fs::absolute(spm_path).string();
  meta.src_spm_checksum = meta.tgt_spm_checksum = tokenizer.checksum();
  meta.src_spm_model = tokenizer.serialized();
  TrainingPosition& position = meta.position;
  if (o.resume) {
    CheckpointMeta saved = restore_training_state(checkpoints.last_path(), model, optimizer.state());
    if (saved.src_spm_checksum != tokenizer.checksum())
      throw std::runtime_error("--resume: tokenizer " + spm_path + " differs from the one the run started with");
    position = saved.position;
    batcher.seek(position.epoch, position.batch_index);
    progress.line("resumed " + checkpoints.last_path() + " at step " + std::to_string(position.step) + ", epoch " +
                  std::to_string(position.epoch) + " batch " + std::to_string(position.batch_index));
  }
  atomic_write(o.out + "/config.yaml",
               "# effective configuration of this run (torchmt train --config " + o.out + "/config.yaml)\n" +
                   meta.train_config);
  progress.line("model " + o.preset + ": " + std::to_string(count_parameters(model)) + " parameters, " +
                std::to_string(batcher.batches_per_epoch()) + " batches/epoch (padding " +
                std::to_string(100 * batcher.padding_fraction()).substr(0, 4) + "%), device " + device.str() +
                ", " + dtype_name(dtype) + ", " + std::to_string(torch::get_num_threads()) + " threads");

  const StopCriteria stop({o.max_steps, o.max_epochs, o.max_minutes}, batcher.batches_per_epoch(), o.update_freq);
  MetricsLog metrics(o.out, position.step);
  TrainSummary summary;
  const double seconds_before = position.train_seconds;
  double train_seconds = 0;  // this process, training steps only
  int64_t total_tokens = 0, bad_steps = 0, last_validated_step = -1;
  LossWindow window;
  const auto run_start = Clock::now();

  // Validates (when asked and there is a validation set), then saves: last always, best when
  // validation improved (or there is none), numbered after a validation.
  auto save = [&](bool validate) {
    bool best = !validator;
    if (validate && validator) {
      const ValidationScores scores = validator->run(model);
      best = Validator::improves(scores, position.best_bleu, position.best_loss);
      if (best) {
        position.best_bleu = scores.bleu;
        position.best_loss = scores.loss;
      }
      ValidationRecord rec;
      rec.step = position.step;
      rec.epoch = position.epoch;
      rec.train_loss = window.mean();
      rec.valid_loss = scores.loss;
      rec.valid_ppl = scores.ppl;
      rec.valid_bleu = scores.bleu;
      rec.tokens_per_sec = train_seconds > 0 ? total_tokens / train_seconds : 0;
      rec.wall_seconds = seconds_before + std::chrono::duration<double>(Clock::now() - run_start).count();
      metrics.add(rec);
      summary.last_bleu = scores.bleu;
      summary.last_valid_loss = scores.loss;
      char buf[256];
      std::snprintf(buf, sizeof(buf), "valid | epoch %lld | step %lld | loss %.3f | ppl %.2f | BLEU %.2f%s | %.1f s",
                    static_cast<long long>(rec.epoch), static_cast<long long>(rec.step), scores.loss, scores.ppl,
                    scores.bleu, best ? " (best)" : "", scores.seconds);
      progress.line(buf);
      window = LossWindow{};
      last_validated_step = position.step;
    }
    checkpoints.save(model, &optimizer.state(), meta, best, validate);
  };

  TrainingStep step(model, optimizer, LabelSmoothedCrossEntropy(o.label_smoothing, kPadId), device, dtype,
                    o.clip_norm);
  while (!stop.reached(position) && !g_stop.load()) {
    const auto step_start = Clock::now();
    const int64_t epoch_before = batcher.epoch();
    std::vector<Batch> batches;
    for (int64_t micro = 0; micro < o.update_freq; ++micro) batches.push_back(batcher.next(device));
    const double lr = schedule.lr(position.step + 1);
    const StepResult result = step.run(batches, lr);
    if (!result.applied) {
      ++bad_steps;
      progress.line("step " + std::to_string(position.step + 1) + " skipped: non-finite " +
                    (std::isfinite(result.loss) ? "gradient" : "loss") + " (" + std::to_string(bad_steps) +
                    " in a row)");
      if (bad_steps >= o.max_bad_steps)
        throw std::runtime_error("training diverged: " + std::to_string(bad_steps) +
                                 " non-finite steps in a row; the last good checkpoint is " + checkpoints.last_path());
      continue;
    }
    bad_steps = 0;
    position.step += 1;
    position.epoch = batcher.epoch();
    position.batch_index = batcher.batch_index();
    summary.steps += 1;
    train_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    position.train_seconds = seconds_before + train_seconds;
    total_tokens += result.tokens;
    window.add(result.loss, result.tokens);
    const double token_loss = result.loss / static_cast<double>(std::max<int64_t>(1, result.tokens));
    summary.last_train_loss = token_loss;

    char buf[256];
    const double eta = stop.eta_seconds(position, train_seconds / static_cast<double>(summary.steps));
    std::snprintf(buf, sizeof(buf), "epoch %lld | step %lld | loss %.3f | ppl %.1f | lr %.2e | %.0f tok/s | %s%s%s",
                  static_cast<long long>(epoch_before), static_cast<long long>(position.step), token_loss,
                  std::exp(std::min(50.0, token_loss)), lr, total_tokens / train_seconds,
                  clock_text(position.train_seconds).c_str(), eta >= 0 ? " | ETA " : "",
                  eta >= 0 ? clock_text(eta).c_str() : "");
    progress.update(position.step, buf);

    const bool epoch_done = batcher.epoch() != epoch_before;
    if (epoch_done) summary.epochs_completed += 1;
    if (o.validate_every > 0 ? position.step % o.validate_every == 0 : epoch_done) save(true);
  }
  summary.interrupted = g_stop.load();
  if (summary.interrupted) {
    progress.line("interrupted: saving " + checkpoints.last_path());
    save(false);
  } else if (last_validated_step != position.step) {
    save(true);  // once more when training ends
  }
  summary.train_seconds = position.train_seconds;
  summary.tokens_per_sec = train_seconds > 0 ? total_tokens / train_seconds : 0;
  summary.best_bleu = position.best_bleu;
  summary.best_checkpoint = checkpoints.best_path();
  return summary;
}

}  // namespace torchmt
