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
#include <regex>

#include <torch/torch.h>

#include "torchmt/data/parallel_corpus.h"
#include "torchmt/data/special_ids.h"
#include "torchmt/data/text_file.h"
#include "torchmt/data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/evaluation/bleu.h"
#include "torchmt/training/adam_optimizer.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/training/inverse_sqrt_schedule.h"
#include "torchmt/training/label_smoothed_cross_entropy.h"
#include "torchmt/training/metrics_log.h"
#include "torchmt/training/training_step.h"
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
  c.max_len = std::max(c.max_len, o.max_len + 2);
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

}  // namespace

void request_training_stop() { g_stop.store(true); }

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) { options_.validate(); }

TrainSummary Trainer::run() {
  const TrainOptions& o = options_;
  using Clock = std::chrono::steady_clock;
  Progress progress(o.log_every);
  StopSignals signals;  // from here on SIGINT/SIGTERM end the run with a checkpoint
  fs::create_directories(o.out);
  const std::string run_dir = o.out;
  if (o.threads > 0) torch::set_num_threads(static_cast<int>(o.threads));
  const c10::Device device = resolve_device(o.device);
  const c10::ScalarType dtype = resolve_dtype(o.dtype, device);

  const std::string last_path = run_dir + "/checkpoint_last.pt";
  const std::string best_path = run_dir + "/checkpoint_best.pt";
  if (o.resume && !fs::exists(last_path))
    throw std::runtime_error("--resume: no checkpoint to resume at " + last_path);
  if (!o.resume && fs::exists(last_path))
    throw std::runtime_error("run directory " + run_dir + " already holds a checkpoint; pass --resume or choose another --out");

  // Tokenizer: the given model, or a joint BPE model trained into the run directory.
  std::string spm_path = o.spm;
  if (spm_path.empty()) {
    spm_path = run_dir + "/spm.model";
    if (!fs::exists(spm_path)) {
      progress.line("training a joint " + std::to_string(o.vocab_size) + " BPE vocabulary -> " + spm_path);
      VocabTrainingOptions v;
      v.inputs = {o.train_src, o.train_tgt};
      v.model_prefix = run_dir + "/spm";
      v.vocab_size = static_cast<int>(o.vocab_size);
      v.seed = static_cast<uint32_t>(o.seed);
      train_bpe_vocab(v);
    }
  }
  const Tokenizer tokenizer = Tokenizer::load(spm_path);

  // Corpora (encoded once, then cached next to the run).
  CorpusOptions corpus_options;
  corpus_options.max_len = o.max_len;
  corpus_options.cache_dir = run_dir + "/cache";
  auto t0 = Clock::now();
  const EncodedCorpus train = load_parallel_corpus(o.train_src, o.train_tgt, tokenizer, tokenizer, corpus_options);
  progress.line("train: " + train.stats.summary() + (train.from_cache ? " (cached)" : "") + " in " +
                std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
  if (train.pairs.empty()) throw std::runtime_error("no training pairs left after filtering " + o.train_src);
  const bool has_valid = !o.valid_src.empty();
  EncodedCorpus valid;
  std::vector<std::string> valid_sources, valid_refs;
  std::vector<Batch> valid_batches;
  if (has_valid) {
    CorpusOptions valid_options = corpus_options;
    valid_options.max_len = std::max<int64_t>(o.max_len, 1000);  // score every validation pair
    valid = load_parallel_corpus(o.valid_src, o.valid_tgt, tokenizer, tokenizer, valid_options);
    valid_sources = read_lines(o.valid_src);
    valid_refs = read_lines(o.valid_tgt);
    progress.line("valid: " + valid.stats.summary());
    BatcherOptions vb;
    vb.max_tokens = o.max_tokens;
    vb.shuffle = false;
    TokenBatcher valid_batcher(valid, vb);
    for (int64_t i = 0; i < valid_batcher.batches_per_epoch(); ++i) valid_batches.push_back(valid_batcher.next(device));
  }

  // Model, optimiser, schedule.
  const ModelConfig model_config = build_model_config(o, tokenizer.vocab_size(), true);
  torch::manual_seed(o.seed);
  Transformer model(model_config);
  model->to(device);
  AdamOptimizer optimizer(unique_parameters(*model), AdamOptions{});
  InverseSqrtSchedule schedule(o.lr_factor, model_config.d_model, o.warmup);
  LabelSmoothedCrossEntropy criterion(o.label_smoothing, kPadId);
  BatcherOptions batcher_options;
  batcher_options.max_tokens = o.max_tokens;
  batcher_options.seed = o.seed;
  TokenBatcher batcher(train, batcher_options);

  CheckpointMeta meta;
  meta.model = model_config;
  meta.train_config = o.to_config().to_yaml();
  meta.src_spm_path = meta.tgt_spm_path = fs::absolute(spm_path).string();
  meta.src_spm_checksum = meta.tgt_spm_checksum = tokenizer.checksum();
  meta.src_spm_model = tokenizer.serialized();
  if (o.resume) {
    CheckpointMeta saved = restore_training_state(last_path, model, optimizer.state());
    if (saved.src_spm_checksum != tokenizer.checksum())
      throw std::runtime_error("--resume: tokenizer " + spm_path + " differs from the one the run started with");
    meta.position = saved.position;
    batcher.seek(meta.position.epoch, meta.position.batch_index);
    progress.line("resumed " + last_path + " at step " + std::to_string(meta.position.step) + ", epoch " +
                  std::to_string(meta.position.epoch) + " batch " + std::to_string(meta.position.batch_index));
  }
  atomic_write(run_dir + "/config.yaml",
               "# effective configuration of this run (torchmt train --config " + run_dir + "/config.yaml)\n" +
                   meta.train_config);
  progress.line("model " + o.preset + ": " + std::to_string(count_parameters(model)) + " parameters, " +
                std::to_string(batcher.batches_per_epoch()) + " batches/epoch (padding " +
                std::to_string(100 * batcher.padding_fraction()).substr(0, 4) + "%), device " + device.str() +
                ", " + dtype_name(dtype) + ", " + std::to_string(torch::get_num_threads()) + " threads");

  MetricsLog metrics(run_dir, meta.position.step);
  TrainSummary summary;
  const double seconds_before = meta.position.train_seconds;
  double train_seconds = 0;  // this process, training steps only
  double window_loss = 0;
  int64_t window_tokens = 0, window_steps = 0, total_tokens = 0, bad_steps = 0;
  int64_t last_validated_step = -1;
  const auto run_start = Clock::now();

  auto validate_and_save = [&](bool validate) {
    ValidationRecord rec;
    rec.step = meta.position.step;
    rec.epoch = meta.position.epoch;
    rec.train_loss = window_tokens > 0 ? window_loss / window_tokens : 0;
    rec.tokens_per_sec = train_seconds > 0 ? total_tokens / train_seconds : 0;
    rec.wall_seconds = seconds_before + std::chrono::duration<double>(Clock::now() - run_start).count();
    bool best = false;
    if (validate && has_valid) {
      auto v0 = Clock::now();
      rec.valid_loss = evaluate_nll(model, valid_batches, device, dtype);
      rec.valid_ppl = std::exp(rec.valid_loss);
      Translator translator(model, tokenizer, tokenizer, device, dtype);
      TranslationOptions topts;
      topts.batch_size = o.valid_batch_size;
      auto hyps = translator.translate_text(valid_sources, topts);
      rec.valid_bleu = evaluation::corpus_bleu(hyps, valid_refs).score;
      model->train();
      metrics.add(rec);
      summary.last_bleu = rec.valid_bleu;
      summary.last_valid_loss = rec.valid_loss;
      best = rec.valid_bleu > meta.position.best_bleu ||
             (rec.valid_bleu == meta.position.best_bleu && rec.valid_loss < meta.position.best_loss);
      if (best) {
        meta.position.best_bleu = rec.valid_bleu;
        meta.position.best_loss = rec.valid_loss;
      }
      char buf[256];
      std::snprintf(buf, sizeof(buf), "valid | epoch %lld | step %lld | loss %.3f | ppl %.2f | BLEU %.2f%s | %.1f s",
                    static_cast<long long>(rec.epoch), static_cast<long long>(rec.step), rec.valid_loss,
                    rec.valid_ppl, rec.valid_bleu, best ? " (best)" : "",
                    std::chrono::duration<double>(Clock::now() - v0).count());
      progress.line(buf);
      window_loss = 0;
      window_tokens = 0;
      last_validated_step = meta.position.step;
    }
    meta.position.train_seconds = seconds_before + train_seconds;
    save_checkpoint(last_path, model, &optimizer.state(), meta);
    if (best || !has_valid) {
      atomic_copy(last_path, best_path);
    }
    if (o.keep_last > 0 && validate) {
      const std::string numbered = run_dir + "/checkpoint_" + std::to_string(meta.position.step) + ".pt";
      atomic_copy(last_path, numbered);
      std::vector<std::pair<int64_t, fs::path>> numbered_files;
      static const std::regex pattern("checkpoint_([0-9]+)\\.pt");
      for (const auto& e : fs::directory_iterator(run_dir)) {
        std::smatch m;
        std::string name = e.path().filename().string();
        if (std::regex_match(name, m, pattern)) numbered_files.emplace_back(std::stoll(m[1]), e.path());
      }
      std::sort(numbered_files.begin(), numbered_files.end());
      for (size_t i = 0; i + static_cast<size_t>(o.keep_last) < numbered_files.size(); ++i)
        fs::remove(numbered_files[i].second);
    }
  };

  auto limit_reached = [&]() {
    if (o.max_steps > 0 && meta.position.step >= o.max_steps) return true;
    if (o.max_epochs > 0 && meta.position.epoch > o.max_epochs) return true;
    if (o.max_minutes > 0 && (seconds_before + train_seconds) / 60.0 >= o.max_minutes) return true;
    return false;
  };
  auto eta_seconds = [&]() -> double {
    const double per_step = train_seconds / std::max<int64_t>(1, summary.steps);
    double eta = -1;
    if (o.max_steps > 0) eta = per_step * static_cast<double>(o.max_steps - meta.position.step);
    if (o.max_epochs > 0) {
      const double remaining_batches = static_cast<double>((o.max_epochs - meta.position.epoch + 1) * batcher.batches_per_epoch() -
                                                           meta.position.batch_index);
      const double e = per_step * remaining_batches / static_cast<double>(o.update_freq);
      eta = eta < 0 ? e : std::min(eta, e);
    }
    if (o.max_minutes > 0) {
      const double e = o.max_minutes * 60 - seconds_before - train_seconds;
      eta = eta < 0 ? e : std::min(eta, e);
    }
    return eta;
  };

  TrainingStep step(model, optimizer, criterion, device, dtype, o.clip_norm);
  while (!limit_reached() && !g_stop.load()) {
    const auto step_start = Clock::now();
    const int64_t epoch_before = batcher.epoch();
    std::vector<Batch> batches;
    for (int64_t micro = 0; micro < o.update_freq; ++micro) batches.push_back(batcher.next(device));
    const double lr = schedule.lr(meta.position.step + 1);
    const StepResult result = step.run(batches, lr);
    const double loss = result.loss;
    const int64_t step_tokens = result.tokens;
    if (!result.applied) {
      ++bad_steps;
      progress.line("step " + std::to_string(meta.position.step + 1) + " skipped: non-finite " +
                    (std::isfinite(loss) ? "gradient" : "loss") + " (" + std::to_string(bad_steps) + " in a row)");
      if (bad_steps >= o.max_bad_steps)
        throw std::runtime_error("training diverged: " + std::to_string(bad_steps) +
                                 " non-finite steps in a row; the last good checkpoint is " + last_path);
      continue;
    }
    bad_steps = 0;
    meta.position.step += 1;
    meta.position.epoch = batcher.epoch();
    meta.position.batch_index = batcher.batch_index();
    summary.steps += 1;
    train_seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    total_tokens += step_tokens;
    window_loss += loss;
    window_tokens += step_tokens;
    summary.last_train_loss = loss / static_cast<double>(std::max<int64_t>(1, step_tokens));
    window_steps += 1;

    char buf[256];
    const double eta = eta_seconds();
    std::snprintf(buf, sizeof(buf), "epoch %lld | step %lld | loss %.3f | ppl %.1f | lr %.2e | %.0f tok/s | %s%s%s",
                  static_cast<long long>(epoch_before), static_cast<long long>(meta.position.step), loss / step_tokens,
                  std::exp(std::min(50.0, loss / step_tokens)), lr, total_tokens / train_seconds,
                  clock_text(seconds_before + train_seconds).c_str(), eta >= 0 ? " | ETA " : "",
                  eta >= 0 ? clock_text(eta).c_str() : "");
    progress.update(meta.position.step, buf);

    const bool epoch_done = batcher.epoch() != epoch_before;
    if (epoch_done) summary.epochs_completed += 1;
    const bool due = o.validate_every > 0 ? meta.position.step % o.validate_every == 0 : epoch_done;
    if (due) validate_and_save(true);
  }
  summary.interrupted = g_stop.load();
  if (summary.interrupted) {
    progress.line("interrupted: saving " + last_path);
    validate_and_save(false);
  } else if (last_validated_step != meta.position.step) {
    validate_and_save(true);  // once more when training ends
  }
  summary.train_seconds = seconds_before + train_seconds;
  summary.tokens_per_sec = train_seconds > 0 ? total_tokens / train_seconds : 0;
  summary.best_bleu = meta.position.best_bleu;
  summary.best_checkpoint = best_path;
  return summary;
}

}  // namespace torchmt
