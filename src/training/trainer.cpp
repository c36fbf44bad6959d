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
#include <set>
#include <thread>

#include <torch/torch.h>

#include "torchmt/data/language_identifier.h"
#include "torchmt/data/parallel_corpus.h"
#include "torchmt/data/special_ids.h"
#include "torchmt/data/token_batcher.h"
#include "torchmt/data/tokenizer.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/training/adam_optimizer.h"
#include "torchmt/training/budget_schedule.h"
#include "torchmt/training/checkpoint_manager.h"
#include "torchmt/training/dtype_probe.h"
#include "torchmt/training/exponential_moving_average.h"
#include "torchmt/training/gradient_reducer.h"
#include "torchmt/training/inverse_sqrt_schedule.h"
#include "torchmt/training/label_smoothed_cross_entropy.h"
#include "torchmt/training/metrics_log.h"
#include "torchmt/training/process_group.h"
#include "torchmt/training/stop_criteria.h"
#include "torchmt/training/training_corpora.h"
#include "torchmt/training/training_step.h"
#include "torchmt/training/validator.h"
#include "torchmt/util/device.h"
#include "torchmt/util/atomic_file.h"
#include "torchmt/util/file_lock.h"
#include "torchmt/util/integrity.h"
#include "torchmt/util/split_mix.h"
#include "torchmt/util/stop_signals.h"
#include "torchmt/util/thread_team.h"
#include "torchmt/util/strings.h"

namespace fs = std::filesystem;

namespace torchmt {
namespace {

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
  if (!o.norm.empty()) c.norm = parse_norm(o.norm);
  if (!o.positions.empty()) c.positions = parse_positions(o.positions);
  if (o.kv_heads >= 0) c.kv_heads = o.kv_heads;
  if (!o.ffn.empty()) c.ffn = parse_ffn(o.ffn);
  if (o.experts > 0) c.experts = o.experts;
  if (o.top_k > 0) c.top_k = o.top_k;
  if (!o.checkpoint_activations.empty()) c.checkpoint_activations = o.checkpoint_activations == "true";
  if (o.tie_embeddings == "true") c.tie_embeddings = true;
  if (o.tie_embeddings == "false") c.tie_embeddings = false;
  if (c.tie_embeddings && !joint_vocab) throw std::invalid_argument("--tie-embeddings needs a joint vocabulary");
  c.max_positions = std::max(c.max_positions, o.max_sentence_tokens + 2);
  c.pad_id = kPadId;
  c.validate();
  return c;
}

// --init-from: the checkpoint's model, which the run's options may not reshape (dropout and
// activation checkpointing are training settings and may change).
ModelConfig init_model_config(const TrainOptions& o, ModelConfig c) {
  for (const auto& [flag, set] : std::vector<std::pair<std::string, bool>>{
           {"--d-model", o.d_model > 0}, {"--num-heads", o.num_heads > 0}, {"--encoder-layers", o.encoder_layers > 0},
           {"--decoder-layers", o.decoder_layers > 0}, {"--d-ff", o.d_ff > 0}, {"--activation", !o.activation.empty()},
           {"--norm", !o.norm.empty()}, {"--positions", !o.positions.empty()}, {"--kv-heads", o.kv_heads >= 0},
           {"--ffn", !o.ffn.empty()}, {"--experts", o.experts > 0}, {"--top-k", o.top_k > 0},
           {"--tie-embeddings", o.tie_embeddings != "auto"}})
    if (set)
      throw std::invalid_argument(flag + " contradicts --init-from " + o.init_from +
                                  ": the model's shape is the checkpoint's (leave " + flag + " out)");
  if (o.max_sentence_tokens + 1 > c.max_positions)
    throw std::invalid_argument("--max-sentence-tokens " + std::to_string(o.max_sentence_tokens) +
                                " is more than the positions of --init-from's model (" + std::to_string(c.max_positions) + ")");
  if (o.dropout >= 0) c.dropout = o.dropout;
  if (!o.checkpoint_activations.empty()) c.checkpoint_activations = o.checkpoint_activations == "true";
  c.validate();
  return c;
}

class Progress {
 public:
  // `quiet`: a data-parallel worker other than rank 0 (rank 0 reports for the job).
  Progress(int64_t log_every, bool quiet, std::function<void(int64_t, const std::string&)> observer)
      : tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet), log_every_(log_every), observer_(std::move(observer)) {}
  void update(int64_t step, const std::string& text) {
    if (quiet_) return;
    if (observer_) observer_(step, text);
    if (tty_) {
      std::cerr << "\r\033[K" << text << std::flush;
      dirty_ = true;
    } else if (step % log_every_ == 0) {
      std::cerr << text << "\n";
    }
  }
  void line(const std::string& text) {
    if (quiet_) return;
    if (observer_) observer_(-1, text);
    if (dirty_) std::cerr << "\n";
    dirty_ = false;
    std::cerr << text << "\n";
  }

 private:
  bool tty_, quiet_;
  int64_t log_every_;
  std::function<void(int64_t, const std::string&)> observer_;
  bool dirty_ = false;
};

// The joint BPE model: the given one, or one trained into the run directory (once).
std::string ensure_tokenizer(const TrainOptions& o, Progress& progress) {
  if (!o.spm.empty()) return o.spm;
  const std::vector<CorpusSpec> specs = corpus_specs(o);
  if (std::string given = dataset_tokenizer(specs); !given.empty()) return given;  // the one its ids belong to
  const std::string path = o.out + "/spm.model";
  if (fs::exists(path)) return path;
  progress.line("training a joint " + std::to_string(o.vocab_size) + " BPE vocabulary -> " + path);
  VocabTrainingOptions v;
  for (const auto& spec : specs) v.inputs.insert(v.inputs.end(), {spec.src, spec.tgt});
  v.model_prefix = o.out + "/spm";
  v.vocab_size = static_cast<int>(o.vocab_size);
  v.seed = static_cast<uint32_t>(o.seed);
  v.num_threads = static_cast<int>(o.threads);
  // Reading a large corpus takes minutes: a stop request ends it (training the pieces, after, cannot).
  v.lines_read = [](int64_t, bool) { StopSignals::throw_if_requested("reading the vocabulary's sentences"); };
  train_bpe_vocab(v);
  return path;
}

// The tokenizer every rank uses: rank 0's (given or trained into its run directory), sent to
// the others as bytes, so workers on other machines need no shared run directory.
Tokenizer shared_tokenizer(const TrainOptions& o, Progress& progress, ProcessGroup* group, std::string& path) {
  std::string proto;
  if (group == nullptr || group->rank() == 0) {
    path = ensure_tokenizer(o, progress);
    proto = Tokenizer::load(path).serialized();
  }
  if (group != nullptr) group->broadcast_bytes(proto, 0);
  if (group != nullptr && group->rank() != 0) {
    const std::string given = o.spm.empty() ? dataset_tokenizer(corpus_specs(o)) : o.spm;
    path = given.empty() ? o.out + "/spm.model" : given;
  }
  return Tokenizer::from_serialized(proto);
}

std::pair<Tokenizer, Tokenizer> same_tokenizer(const Tokenizer& tokenizer) { return {tokenizer, tokenizer}; }

// --init-from: the checkpoint's tokenizers; a --spm that is not its vocabulary is an error.
std::pair<Tokenizer, Tokenizer> init_tokenizers(const TrainOptions& o, const LoadedCheckpoint& init, std::string& path) {
  auto tokenizers = [&] {
    try {
      return checkpoint_tokenizers(init.meta);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error("--init-from " + o.init_from + " " + e.what());
    }
  }();
  if (!o.spm.empty() && Tokenizer::load(o.spm).checksum() != tokenizers.first.checksum())
    throw std::invalid_argument("--spm " + o.spm + " is not the vocabulary of --init-from " + o.init_from +
                                " (fine-tuning keeps the model's; leave --spm out)");
  path = init.meta.src_spm_path.empty() ? o.init_from : init.meta.src_spm_path;
  return tokenizers;
}

// The languages a run records: the flags', else what every text corpus's file names agree on
// (train.de / train.en), else --init-from's.
std::pair<std::string, std::string> run_languages(const TrainOptions& o, const std::pair<std::string, std::string>& init) {
  std::string source = o.source_language, target = o.target_language;
  std::set<std::string> sources, targets;
  for (const auto& spec : corpus_specs(o)) {
    if (spec.src.empty()) continue;
    sources.insert(language_of_file_name(spec.src));
    targets.insert(language_of_file_name(spec.tgt));
  }
  if (source.empty() && sources.size() == 1) source = *sources.begin();
  if (target.empty() && targets.size() == 1) target = *targets.begin();
  return {source.empty() ? init.first : source, target.empty() ? init.second : target};
}

// The model's language identifier, learned from up to `max_pairs` pairs of the corpora (both
// sides, decoded back to text, evenly spread over each corpus).
LanguageIdentifier learn_corpus_languages(const std::vector<CorpusShare>& shares, const Tokenizer& src_tokenizer,
                                   const Tokenizer& tgt_tokenizer, const std::string& source, const std::string& target,
                                   int64_t max_pairs) {
  int64_t total = 0;
  for (const auto& share : shares) total += share.source->size();
  std::vector<std::string> src_texts, tgt_texts;
  std::vector<int64_t> ids;
  for (const auto& share : shares) {
    const int64_t n = share.source->size();
    const int64_t take = total <= max_pairs ? n : std::max<int64_t>(1, n * max_pairs / std::max<int64_t>(total, 1));
    for (int64_t k = 0; k < std::min(take, n); ++k) {
      const int64_t i = take >= n ? k : k * n / take;
      ids.resize(static_cast<size_t>(share.source->src_length(i)));
      share.source->copy_src(i, ids.data());
      src_texts.push_back(src_tokenizer.decode(ids));
      ids.resize(static_cast<size_t>(share.source->tgt_length(i)));
      share.source->copy_tgt(i, ids.data());
      tgt_texts.push_back(tgt_tokenizer.decode(ids));
    }
  }
  LanguageIdentifier identifier;
  if (!source.empty()) identifier.learn(source, src_texts);
  if (!target.empty() && target != source) identifier.learn(target, tgt_texts);
  return identifier;
}

// The process group when this process is one of several data-parallel workers.
std::unique_ptr<ProcessGroup> join_process_group(const TrainOptions& o, const DistributedEnv& env) {
  if (!env.present) return nullptr;
  if (env.world_size > 1 && o.nproc_per_node > 1 && env.local_world_size != o.nproc_per_node)
    throw std::invalid_argument("--nproc-per-node " + std::to_string(o.nproc_per_node) + " but LOCAL_WORLD_SIZE is " +
                                std::to_string(env.local_world_size));
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.dist_timeout * 1000));
  return std::make_unique<ProcessGroup>(env, timeout, resolve_device(o.device, env.local_rank));
}

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

// Creates the run directory; refuses to overwrite a run or to resume nothing (rank 0 decides
// for a data-parallel job: the others may not share its disk). Returns `o`.
const TrainOptions& prepare_run_directory(const TrainOptions& o, const DistributedEnv& env) {
  if (env.rank != 0) return o;
  fs::create_directories(o.out);
  const std::string last = CheckpointManager(o.out, o.keep_last).last_path();
  if (o.resume && !fs::exists(last)) throw std::runtime_error("--resume: no checkpoint to resume at " + last);
  if (!o.resume && fs::exists(last))
    throw std::runtime_error("run directory " + o.out +
                             " already holds a checkpoint; pass --resume or choose another --out");
  return o;
}

// A seed from (seed, update, rank) without collisions between nearby values (splitmix64's
// finaliser over each part in turn).
uint64_t mix_seed(uint64_t seed, uint64_t update, uint64_t rank) {
  uint64_t h = seed;
  for (uint64_t part : {update, rank}) h = mix64(h + part);
  return h;
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
  TrainingRun(const TrainOptions& options, const TrainHooks& hooks);
  TrainSummary loop();

 private:
  using Clock = std::chrono::steady_clock;
  // Validates (when asked and there is a validation set), then saves: last always, best when
  // validation improved (or there is none), numbered after a validation.
  void validate_and_save(bool validate);
  void log_update(int64_t epoch, double lr, double eta);

  // Before and after rank 0's work that the others must not overlap (setup, validation, saving).
  void wait_for_rank0();

  const DistributedEnv env_;
  const TrainOptions& o_;
  const bool rank0_;
  std::optional<FileLock> run_lock_;  // rank 0: one writer per run directory, to the end of the run
  Progress progress_;
  std::unique_ptr<ProcessGroup> group_;  // data-parallel workers only
  c10::Device device_;
  c10::ScalarType dtype_;
  CheckpointManager checkpoints_;
  std::optional<LoadedCheckpoint> init_;  // --init-from, until its weights are copied
  std::string spm_path_;
  std::pair<Tokenizer, Tokenizer> tokenizers_;  // source, target (one for a joint vocabulary)
  const Tokenizer& tokenizer_ = tokenizers_.first;
  const Tokenizer& tgt_tokenizer_ = tokenizers_.second;
  std::unique_ptr<TrainingCorpora> corpora_;
  std::optional<Validator> validator_;
  std::optional<Runtime> runtime_;  // TrainHooks::runtime
  ModelConfig model_config_;
  Transformer model_{nullptr};
  std::unique_ptr<AdamOptimizer> optimizer_;
  std::unique_ptr<TokenBatcher> batcher_;  // points into corpora_
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<ExponentialMovingAverage> ema_;  // --ema-decay; its tensors live in the optimizer state
  double last_lr_ = 0;
  CheckpointMeta meta_;
  TrainingPosition& position_ = meta_.position;
  // This process's progress.
  TrainSummary summary_;
  double seconds_before_ = 0;  // training time of earlier runs (resume)
  double train_seconds_ = 0;   // this process, training steps only
  int64_t total_tokens_ = 0, last_validated_step_ = -1;
  double allreduce_wait_ = 0;  // seconds this process waited for gradient all-reduces
  LossWindow window_;
  Clock::time_point run_start_ = Clock::now();
};

TrainingRun::TrainingRun(const TrainOptions& o, const TrainHooks& hooks)
    : env_(DistributedEnv::from_environment()),
      o_(prepare_run_directory(o, env_)),
      rank0_(env_.rank == 0),
      progress_(o.log_every, !rank0_, hooks.on_progress),
      group_(join_process_group(o, env_)),
      device_(resolve_device(o.device, env_.local_rank)),
      // "auto" is measured once the model exists (choose_training_dtype, in the constructor).
      dtype_(o.dtype == "auto" ? c10::ScalarType::Float : resolve_dtype(o.dtype, device_)),
      checkpoints_(o.out, o.keep_last),
      init_(o.init_from.empty() ? std::nullopt : std::optional<LoadedCheckpoint>(load_checkpoint(o.init_from, torch::kCPU))),
      tokenizers_(init_ ? init_tokenizers(o, *init_, spm_path_) : same_tokenizer(shared_tokenizer(o, progress_, group_.get(), spm_path_))) {
  runtime_ = hooks.runtime;
  if (rank0_) run_lock_.emplace(o.out + "/train.lock", "run directory " + o.out);
  if (group_) progress_.line("data parallel: " + std::to_string(group_->size()) + " workers (c10d " + group_->backend() + ", " +
                             env_.master_addr + ":" + std::to_string(env_.master_port) + ")");
  // Corpora: text is preprocessed into the run's cache once (rank 0 first, the others read it
  // when they share the disk); datasets are mapped.
  CorpusOptions corpus_options;
  corpus_options.max_sentence_tokens = o.max_sentence_tokens;
  corpus_options.num_threads = static_cast<int>(o.threads);  // --threads bounds every pool of the run
  const auto t0 = Clock::now();
  if (!rank0_) wait_for_rank0();
  PreprocessOptions preprocess;
  preprocess.corpus = corpus_options;
  preprocess.should_stop = [] { return StopSignals::requested(); };
  corpora_ = std::make_unique<TrainingCorpora>(corpus_specs(o), tokenizer_, tgt_tokenizer_, o.out + "/cache", preprocess,
                                               [this](const std::string& text) { progress_.line(text); });
  if (rank0_) wait_for_rank0();
  progress_.line("train: " + with_thousands(corpora_->pairs()) + " pairs ready in " +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
  if (corpora_->pairs() == 0) throw std::runtime_error("no training pairs left after filtering");

  // Model, optimiser, batches.
  std::pair<std::string, std::string> init_languages;  // --init-from's, recorded below unless the run names its own
  model_config_ = init_ ? init_model_config(o, init_->meta.model) : build_model_config(o, tokenizer_.vocab_size(), true);
  torch::manual_seed(o.seed);
  model_ = Transformer(model_config_);
  model_->to(device_);
  if (init_) {
    torch::NoGradGuard no_grad;
    auto params = init_->model->named_parameters();
    for (auto& item : model_->named_parameters()) item.value().copy_(params[item.key()]);
    auto buffers = init_->model->named_buffers();
    for (auto& item : model_->named_buffers()) item.value().copy_(buffers[item.key()]);
    meta_.vocabulary = init_->meta.vocabulary;
    init_languages = {init_->meta.source_language, init_->meta.target_language};
    progress_.line("init: weights and vocabulary of " + o.init_from + " (step " + std::to_string(init_->meta.position.step) +
                   "); new schedule, fresh optimizer state");
    init_.reset();
  }
  optimizer_ = std::make_unique<AdamOptimizer>(unique_parameters(*model_), AdamOptions{});
  if (o.ema_decay > 0)
    ema_ = std::make_unique<ExponentialMovingAverage>(unique_parameters(*model_), optimizer_->state().ema, o.ema_decay);
  BatcherOptions batcher_options;
  batcher_options.batch_tokens = o.batch_tokens;
  batcher_options.seed = o.seed;
  batcher_options.window_pairs = o.shuffle_window;
  batcher_options.special = model_config_.special_ids();
  batcher_options.threads = o.threads;
  batcher_ = std::make_unique<TokenBatcher>(corpora_->shares(), batcher_options);
  if (o.dtype == "auto") {
    // Rank 0 measures (on the first batches of a batcher of its own) and every rank follows.
    std::string reason;
    if (rank0_) {
      TokenBatcher probe_batches = *batcher_;  // a copy: building one again costs seconds on a big corpus
      std::vector<Batch> sample;
      for (int64_t i = 0; i < std::min<int64_t>(4, probe_batches.batches_per_epoch()); ++i)
        sample.push_back(probe_batches.next(device_));
      StopSignals::throw_if_requested("setting up");
      const DtypeChoice choice = choose_training_dtype(model_config_, sample, device_);
      StopSignals::throw_if_requested("measuring the training dtype");
      dtype_ = choice.dtype;
      reason = choice.reason;
    }
    if (group_) {
      auto code = torch::tensor({dtype_ == c10::ScalarType::BFloat16 ? 1.0 : 0.0}, torch::kDouble);
      group_->broadcast({code}, 0);
      dtype_ = code.item<double>() != 0 ? c10::ScalarType::BFloat16 : c10::ScalarType::Float;
    }
    progress_.line("dtype auto: " + reason);
  }
  if (!o.valid_src.empty() && rank0_) {
    validator_.emplace(o.valid_src, o.valid_tgt, tokenizer_, tgt_tokenizer_, corpus_options, o.batch_tokens, o.valid_batch_size,
                       device_, dtype_);
    progress_.line("valid: " + validator_->summary());
  }

  meta_.model = model_config_;
  meta_.train_config = o.to_config().to_yaml();
  meta_.src_spm_path = meta_.tgt_spm_path = fs::absolute(spm_path_).string();
  meta_.src_spm_checksum = tokenizer_.checksum();
  meta_.tgt_spm_checksum = tgt_tokenizer_.checksum();
  meta_.src_spm_model = tokenizer_.serialized();
  if (tgt_tokenizer_.serialized() != tokenizer_.serialized()) meta_.tgt_spm_model = tgt_tokenizer_.serialized();
  std::tie(meta_.source_language, meta_.target_language) = run_languages(o, init_languages);
  if (rank0_ && (!meta_.source_language.empty() || !meta_.target_language.empty())) {
    const auto t_languages = Clock::now();
    const LanguageIdentifier identifier = learn_corpus_languages(corpora_->shares(), tokenizer_, tgt_tokenizer_,
                                                                 meta_.source_language, meta_.target_language, 100000);
    meta_.language_identifier = identifier.serialize();
    progress_.line("languages: " + (meta_.source_language.empty() ? "?" : meta_.source_language) + " -> " +
                   (meta_.target_language.empty() ? "?" : meta_.target_language) + ", identifier learned in " +
                   std::to_string(std::chrono::duration<double>(Clock::now() - t_languages).count()).substr(0, 4) + " s");
  }
  // fp16: the loss scale lives in the optimizer state from here on, so a resume restores it
  // and every rank starts from rank 0's.
  if (dtype_ == c10::ScalarType::Half) start_loss_scaling(optimizer_->state(), device_);
  if (const int64_t stale = rank0_ ? checkpoints_.remove_stale_temporaries() : 0; stale > 0)
    progress_.line("removed " + std::to_string(stale) + " temporary file(s) left by an interrupted run in " + o.out);
  if (o.resume && rank0_) {
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
  if (group_) {
    // Every rank starts from rank 0's weights, optimizer state and position (whatever the
    // others initialised or could read), so a job may resume on a different number of workers.
    std::vector<at::Tensor> state = unique_parameters(*model_);
    for (auto* part : {&optimizer_->state().exp_avg, &optimizer_->state().exp_avg_sq, &optimizer_->state().steps,
                       &optimizer_->state().ema})
      state.insert(state.end(), part->begin(), part->end());
    for (const auto& t : {optimizer_->state().loss_scale, optimizer_->state().growth_tracker})
      if (t.defined()) state.push_back(t);
    {
      torch::NoGradGuard no_grad;
      group_->broadcast(state, 0);
    }
    auto where = torch::tensor({static_cast<double>(position_.step), static_cast<double>(position_.epoch),
                                static_cast<double>(position_.batch_index), position_.best_bleu, position_.best_loss,
                                position_.train_seconds},
                               torch::kDouble);
    group_->broadcast({where}, 0);
    position_.step = static_cast<int64_t>(where[0].item<double>());
    position_.epoch = static_cast<int64_t>(where[1].item<double>());
    position_.batch_index = static_cast<int64_t>(where[2].item<double>());
    position_.best_bleu = where[3].item<double>();
    position_.best_loss = where[4].item<double>();
    position_.train_seconds = where[5].item<double>();
    batcher_->seek(position_.epoch, position_.batch_index);
    // A 1 MB first bucket, as DDP's: its all-reduce starts early in backward, which hides more
    // of the all-reduce time (tools/bench/grad_reducer.cpp; figures in tools/bench/DECISIONS.md).
    const auto bucket_bytes = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
    reducer_ = std::make_unique<GradientReducer>(unique_parameters(*model_), *group_, bucket_bytes,
                                                 o.overlap_allreduce, std::min<int64_t>(bucket_bytes, 1 << 20));
  }
  seconds_before_ = position_.train_seconds;
  if (rank0_)
    atomic_write(o.out + "/config.yaml",
               seal_text("# effective configuration of this run (torchmt train --config " + o.out +
                         "/config.yaml); the last line is its checksum: delete it after editing by hand\n" +
                         meta_.train_config));
  progress_.line("model " + o.preset + ": " + std::to_string(count_parameters(model_)) + " parameters, " +
                 with_thousands(batcher_->batches_per_epoch()) + " batches/epoch (padding " +
                 std::to_string(100 * batcher_->padding_fraction()).substr(0, 4) + "%" +
                 (batcher_->windows_per_epoch() > 1
                      ? ", " + std::to_string(batcher_->windows_per_epoch()) + " windows of " +
                            with_thousands(o.shuffle_window) + " pairs"
                      : std::string()) +
                 "), device " + device_.str() +
                 ", " + dtype_name(dtype_) + ", " + std::to_string(torch::get_num_threads()) + " threads");
  if (group_)
    progress_.line("gradient all-reduce: " + std::to_string(reducer_->bytes() / 1024) + " KiB per update in " +
                   std::to_string(reducer_->buckets()) + " bucket(s), " +
                   (o.overlap_allreduce ? "overlapped with backward" : "after backward") + "; global batch " +
                   std::to_string(group_->size()) + " x " + std::to_string(o.batch_tokens) + " tokens x " +
                   std::to_string(o.update_freq));
  if (rank0_) {
    metrics_ = std::make_unique<MetricsLog>(o.out, position_.step);
    // --average-best: the kept weights of earlier validations, with their BLEU from metrics.csv.
    std::vector<std::pair<int64_t, double>> validated;
    for (const auto& r : metrics_->records()) validated.emplace_back(r.step, r.valid_bleu);
    checkpoints_.recall_top(validated);
  }
}

void TrainingRun::wait_for_rank0() {
  if (group_) group_->barrier();
}

void TrainingRun::validate_and_save(bool validate) {
  if (!rank0_) {
    wait_for_rank0();  // rank 0 validates and writes for the job
    return;
  }
  // The weights checkpoint_best.pt may hold: the weights themselves, their moving average
  // (--ema-decay), the average of the best validations' weights (--average-best); the one that
  // scores highest, when it beats the best so far.
  enum Candidate { kWeights, kMovingAverage, kBestAverage };
  static const char* const kNames[] = {"weights", "moving average", "average of the best"};
  bool best = !validator_;
  Candidate winner = kWeights;
  std::vector<at::Tensor> best_average;  // the --average-best weights, when they win
  if (validate && validator_) {
    const ValidationScores scores = validator_->run(model_, runtime_);
    std::optional<ValidationScores> ema_scores, top_scores;
    if (ema_) {
      ScopedWeights swap(ema_->params(), ema_->average());
      ema_scores = validator_->run(model_, runtime_);
    }
    std::vector<at::Tensor> top_average;
    if (o_.average_best > 1 && checkpoints_.offer_top(model_, meta_, scores.bleu, o_.average_best) &&
        checkpoints_.top_paths().size() >= 2) {
      LoadedCheckpoint averaged = average_checkpoints(checkpoints_.top_paths());
      for (auto& t : unique_parameters(*averaged.model)) top_average.push_back(t.to(device_));
      ScopedWeights swap(unique_parameters(*model_), top_average);
      top_scores = validator_->run(model_, runtime_);
    }
    const ValidationScores* chosen = &scores;
    for (auto [candidate, s] : {std::pair{kMovingAverage, &ema_scores}, std::pair{kBestAverage, &top_scores}}) {
      if (*s && Validator::improves(**s, chosen->bleu, chosen->loss)) {
        chosen = &**s;
        winner = candidate;
      }
    }
    best = Validator::improves(*chosen, position_.best_bleu, position_.best_loss);
    if (best) {
      position_.best_bleu = chosen->bleu;
      position_.best_loss = chosen->loss;
      if (winner == kBestAverage) best_average = std::move(top_average);
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
    rec.lr = last_lr_;
    if (ema_scores) rec.ema_bleu = ema_scores->bleu;
    if (top_scores) rec.avg_bleu = top_scores->bleu;
    const std::vector<int64_t> drawn = batcher_->drawn_pairs(position_.epoch, position_.batch_index);
    rec.corpus_pairs = corpora_->counts_field(drawn);
    metrics_->add(rec);
    if (corpora_->specs().size() > 1) progress_.line("corpora drawn so far: " + corpora_->counts_text(drawn));
    summary_.last_bleu = scores.bleu;
    summary_.last_valid_loss = scores.loss;
    char buf[320];
    std::snprintf(buf, sizeof(buf), "valid | epoch %lld | step %lld | loss %.3f | ppl %.2f | BLEU %.2f%s | %.1f s",
                  static_cast<long long>(rec.epoch), static_cast<long long>(rec.step), scores.loss, scores.ppl,
                  scores.bleu, best && winner == kWeights ? " (best)" : "", scores.seconds);
    std::string text = buf;
    for (auto [candidate, s] : {std::pair{kMovingAverage, &ema_scores}, std::pair{kBestAverage, &top_scores}}) {
      if (!*s) continue;
      std::snprintf(buf, sizeof(buf), " | %s: loss %.3f, BLEU %.2f%s", kNames[candidate], (*s)->loss, (*s)->bleu,
                    best && winner == candidate ? " (best)" : "");
      text += buf;
    }
    progress_.line(text);
    window_ = LossWindow{};
    last_validated_step_ = position_.step;
  }
  checkpoints_.save(model_, &optimizer_->state(), meta_, best && winner == kWeights, validate);
  if (best && winner != kWeights) {
    ScopedWeights swap(unique_parameters(*model_), winner == kMovingAverage ? ema_->average() : best_average);
    checkpoints_.save_best(model_, meta_);
  }
  wait_for_rank0();
}

TrainSummary TrainingRun::loop() {
  const int64_t world = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  const StopCriteria stop({o_.max_steps, o_.max_epochs, o_.max_minutes}, batcher_->batches_per_epoch(),
                          o_.update_freq * world);
  const InverseSqrtSchedule schedule(o_.lr_factor, model_config_.d_model, o_.warmup);
  // A budget schedule plans the number of updates; for a time budget, rank 0 re-plans from its
  // measured seconds per update after every update and every rank follows its plan.
  std::optional<BudgetSchedule> budget;
  std::optional<BudgetPlanner> planner;
  int64_t planned = 0;
  const double resumed_seconds_per_update =
      position_.step > 0 ? position_.train_seconds / static_cast<double>(position_.step) : 1.0;
  if (o_.lr_schedule != "paper") {
    budget.emplace(BudgetScheduleOptions{parse_budget_shape(o_.lr_schedule), o_.lr, o_.warmup_fraction,
                                         o_.min_lr_ratio, o_.cooldown_fraction});
    planner.emplace(o_.max_steps, o_.max_epochs, o_.max_minutes,
                    static_cast<double>(batcher_->batches_per_epoch()) / static_cast<double>(o_.update_freq * world));
    planned = planner->planned_steps(position_, resumed_seconds_per_update);
  }
  auto replan = [&] {
    planner->record(position_, train_seconds_);
    if (o_.max_minutes <= 0) return;  // a step or epoch budget is exact from the start
    planned = planner->planned_steps(position_, resumed_seconds_per_update);
    if (group_) {
      auto plan = torch::tensor({static_cast<double>(planned)}, torch::kDouble);
      group_->broadcast({plan}, 0);
      planned = static_cast<int64_t>(plan.item<double>());
    }
  };
  bool plan_reported = false;
  auto report_plan = [&] {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "schedule %s: %lld updates planned for the budget%s, warm-up %lld, peak %.2e, floor %.2e",
                  o_.lr_schedule.c_str(), static_cast<long long>(planned),
                  planner->measured() && o_.max_minutes > 0
                      ? (" (" + std::to_string(planner->seconds_per_update()).substr(0, 5) + " s per update measured)").c_str()
                      : "",
                  static_cast<long long>(budget->warmup_steps(planned)), o_.lr, o_.lr * o_.min_lr_ratio);
    progress_.line(buf);
  };
  TrainingStep step(model_, *optimizer_, LabelSmoothedCrossEntropy(o_.label_smoothing, model_config_.pad_id), device_, dtype_,
                    o_.clip_norm);
  step.distribute(reducer_.get(), group_.get());
  step.set_moe_aux_loss(o_.moe_aux_loss);
  int64_t bad_steps = 0;
  // An update reads world x update_freq batches of the one global order; rank r takes every
  // world-th from the r-th, so N workers see what one worker with --update-freq N sees.
  auto next_batches = [&] {
    std::vector<Batch> batches;
    for (int64_t i = 0; i < o_.update_freq * world; ++i) {
      if (i % world == rank)
        batches.push_back(batcher_->next(device_));
      else
        batcher_->skip();
    }
    return batches;
  };
  // Whether to go on: every rank must agree (a time limit or a signal may reach one first).
  auto keep_going = [&] {
    const bool go = !stop.reached(position_) && !StopSignals::requested();
    return group_ ? group_->all_true(go) : go;
  };
  std::vector<Batch> batches;
  while (keep_going()) {
    const auto step_start = Clock::now();
    // Dropout's randomness under data parallelism: a function of (seed, update, rank), so a
    // resumed job draws what it would have drawn, whatever it was saved with.
    if (group_) torch::manual_seed(mix_seed(o_.seed, static_cast<uint64_t>(position_.step), static_cast<uint64_t>(rank)));
    const int64_t epoch_before = position_.epoch;
    if (batches.empty()) batches = next_batches();
    // Where the batcher stands after this update's batches: what a checkpoint records.
    const int64_t epoch_after = batcher_->epoch(), batch_index_after = batcher_->batch_index();
    const double lr = budget ? budget->lr(position_.step + 1, planned) : schedule.lr(position_.step + 1);
    last_lr_ = lr;
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
    if (reducer_) allreduce_wait_ += reducer_->last_wait_seconds();
    position_.train_seconds = seconds_before_ + train_seconds_;
    total_tokens_ += result.tokens;
    window_.add(result.loss, result.tokens);
    if (ema_) ema_->update(position_.step);
    if (planner) {
      replan();
      // Once the throughput is known (or at once for an exact budget), say what the budget buys.
      if (!plan_reported && (o_.max_minutes <= 0 || summary_.steps == 20)) {
        report_plan();
        plan_reported = true;
      }
    }
    summary_.last_train_loss = result.loss / static_cast<double>(std::max<int64_t>(1, result.tokens));
    const double eta = stop.eta_seconds(position_, train_seconds_ / static_cast<double>(summary_.steps));
    log_update(epoch_before, lr, eta);

    const bool epoch_done = epoch_after != epoch_before;
    if (epoch_done) summary_.epochs_completed += 1;
    if (o_.validate_every > 0 ? position_.step % o_.validate_every == 0 : epoch_done) validate_and_save(true);
  }
  // Ended before a limit: a signal, here or (under data parallelism) at another worker.
  summary_.interrupted = StopSignals::requested() || !stop.reached(position_);
  bool validate_once_more = !summary_.interrupted && last_validated_step_ != position_.step;
  if (group_) {
    // Rank 0's view decides (a time limit may read differently elsewhere; only rank 0 knows
    // when it last validated), and every rank then makes the same calls.
    auto decision = torch::tensor({summary_.interrupted ? 1.0 : 0.0, validate_once_more ? 1.0 : 0.0}, torch::kDouble);
    group_->broadcast({decision}, 0);
    summary_.interrupted = decision[0].item<double>() != 0;
    validate_once_more = decision[1].item<double>() != 0;
  }
  if (summary_.interrupted) {
    progress_.line("interrupted: saving " + checkpoints_.last_path());
    validate_and_save(false);
  } else if (validate_once_more) {
    validate_and_save(true);  // once more when training ends
  }
  if (reducer_ && summary_.steps > 0) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "data parallel: %.1f ms per update waiting for the gradient all-reduce after backward (%.1f%% of "
                  "the update; %.0f KiB per update)",
                  1000 * allreduce_wait_ / static_cast<double>(summary_.steps),
                  train_seconds_ > 0 ? 100 * allreduce_wait_ / train_seconds_ : 0.0,
                  static_cast<double>(reducer_->bytes()) / 1024);
    progress_.line(buf);
  }
  summary_.train_seconds = position_.train_seconds;
  summary_.tokens_per_sec = train_seconds_ > 0 ? total_tokens_ / train_seconds_ : 0;
  summary_.best_bleu = position_.best_bleu;
  summary_.best_checkpoint = checkpoints_.best_path();
  summary_.reporting = rank0_;
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
