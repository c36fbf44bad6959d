#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include <torch/torch.h>

#include "torchmt/data/language_identifier.h"
#include "data/parallel_corpus.h"
#include "torchmt/data/special_ids.h"
#include "training/dtype_probe.h"
#include "util/atomic_file.h"
#include "torchmt/util/device.h"
#include "util/integrity.h"
#include "util/stop_signals.h"
#include "torchmt/util/strings.h"
#include "training_run.h"

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

// The joint BPE model: the given one, or one trained into the run directory (once).
std::string ensure_tokenizer(const TrainOptions& o, ProgressObserver& progress) {
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
  // Reading a large corpus and learning its pieces take minutes: a stop request ends either.
  v.stop_requested = [] { return StopSignals::requested(); };
  train_bpe_vocab(v);
  return path;
}

// The tokenizer every rank uses: rank 0's (given or trained into its run directory), sent to
// the others as bytes, so workers on other machines need no shared run directory.
Tokenizer shared_tokenizer(const TrainOptions& o, ProgressObserver& progress, ProcessGroup* group, std::string& path) {
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




}  // namespace

TrainingRun::TrainingRun(const TrainOptions& o, const TrainHooks& hooks)
    : env_(DistributedEnv::from_environment()),
      o_(o),
      rank0_(env_.rank == 0),
      log_(o.log_every, !rank0_, hooks.on_progress),
      runtime_(hooks.runtime),
      checkpoints_(o.out, o.keep_last) {
  open_run_directory();
  join_group();
  load_tokenizers();
  read_corpora();
  build_model();
  build_batcher();
  choose_dtype();
  build_validator();
  choose_output_columns();
  describe_run();
  resume();
  learn_languages();
  start_from_rank0();
  report_set_up();
  add_observers();
}

// Creates the run directory and holds it; refuses to overwrite a run or to resume nothing (rank 0
// decides for a data-parallel job: the others may not share its disk).
void TrainingRun::open_run_directory() {
  if (!rank0_) return;
  fs::create_directories(o_.out);
  const std::string last = checkpoints_.last_path();
  if (o_.resume && !fs::exists(last)) throw std::runtime_error("--resume: no checkpoint to resume at " + last);
  // Any of a run's files, not only its last checkpoint: a directory whose checkpoint_last.pt is
  // gone still holds a best model and numbered checkpoints a new run would replace and prune.
  if (!o_.resume)
    for (const auto& entry : fs::directory_iterator(o_.out)) {
      const std::string name = entry.path().filename().string();
      if ((name.rfind("checkpoint", 0) == 0 && entry.path().extension() == ".pt") || name == "metrics.csv")
        throw std::runtime_error("run directory " + o_.out + " already holds a run (" + name +
                                 "); pass --resume or choose another --out");
    }
  run_lock_.emplace(o_.out + "/train.lock", "run directory " + o_.out);
}

// The process group when this process is one of several data-parallel workers, and its device.
void TrainingRun::join_group() {
  if (env_.present) {
    if (env_.world_size > 1 && o_.nproc_per_node > 1 && env_.local_world_size != o_.nproc_per_node)
      throw std::invalid_argument("--nproc-per-node " + std::to_string(o_.nproc_per_node) +
                                  " but LOCAL_WORLD_SIZE is " + std::to_string(env_.local_world_size));
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o_.dist_timeout * 1000));
    group_ = std::make_unique<ProcessGroup>(env_, timeout, resolve_device(o_.device, env_.local_rank));
  }
  device_ = resolve_device(o_.device, env_.local_rank);
  // "auto" is measured once the model exists (choose_dtype).
  dtype_ = o_.dtype == "auto" ? c10::ScalarType::Float : resolve_dtype(o_.dtype, device_);
}

// --init-from's tokenizers (and weights, kept until build_model), else rank 0's joint vocabulary.
void TrainingRun::load_tokenizers() {
  if (!o_.init_from.empty()) {
    init_.emplace(load_checkpoint(o_.init_from, torch::kCPU));
    tokenizers_.emplace(init_tokenizers(o_, *init_, spm_path_));
  } else {
    const Tokenizer joint = shared_tokenizer(o_, log_, group_.get(), spm_path_);
    tokenizers_.emplace(joint, joint);
  }
  if (group_)
    log_.line("data parallel: " + std::to_string(group_->size()) + " workers (c10d " + group_->backend() + ", " +
              env_.master_addr + ":" + std::to_string(env_.master_port) + ")");
}

// Text is preprocessed into the run's cache once (rank 0 first, the others read it when they
// share the disk); datasets are mapped.
void TrainingRun::read_corpora() {
  const auto t0 = Clock::now();
  if (!rank0_) wait_for_rank0();
  PreprocessOptions preprocess;
  preprocess.corpus.max_sentence_tokens = o_.max_sentence_tokens;
  preprocess.corpus.num_threads = static_cast<int>(o_.threads);  // --threads bounds every pool of the run
  preprocess.should_stop = [] { return StopSignals::requested(); };
  corpora_ = std::make_unique<TrainingCorpora>(corpus_specs(o_), src_tokenizer(), tgt_tokenizer(), o_.out + "/cache",
                                               preprocess, [this](const std::string& text) { log_.line(text); },
                                               o_.both_directions);
  if (rank0_) wait_for_rank0();
  log_.line("train: " + with_thousands(corpora_->pairs()) + " pairs ready in " +
            std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
  if (corpora_->pairs() == 0) throw std::runtime_error("no training pairs left after filtering");
}

// The model (--init-from's weights, or fresh from the seed), the optimizer and the moving average.
void TrainingRun::build_model() {
  model_config_ = init_ ? init_model_config(o_, init_->meta.model)
                        : build_model_config(o_, src_tokenizer().vocab_size(), true);
  torch::manual_seed(o_.seed);
  model_ = Transformer(model_config_);
  model_->to(device_);
  if (init_) {
    torch::NoGradGuard no_grad;
    auto params = init_->model->named_parameters();
    for (auto& item : model_->named_parameters()) item.value().copy_(params[item.key()]);
    auto buffers = init_->model->named_buffers();
    for (auto& item : model_->named_buffers()) item.value().copy_(buffers[item.key()]);
    meta_.vocabulary = init_->meta.vocabulary;
    init_languages_ = {init_->meta.source_language, init_->meta.target_language};
    init_columns_ = {init_->meta.target_columns, init_->meta.source_columns};
    log_.line("init: weights and vocabulary of " + o_.init_from + " (step " +
              std::to_string(init_->meta.position.step) + "); new schedule, fresh optimizer state");
    init_.reset();
  }
  optimizer_ = std::make_unique<AdamOptimizer>(unique_parameters(*model_), AdamOptions{});
  if (o_.ema_decay > 0)
    ema_ = std::make_unique<ExponentialMovingAverage>(unique_parameters(*model_), optimizer_->state().ema, o_.ema_decay);
}

void TrainingRun::build_batcher() {
  BatcherOptions b;
  b.batch_tokens = o_.batch_tokens;
  b.seed = o_.seed;
  b.window_pairs = o_.shuffle_window;
  b.special = model_config_.special_ids();
  b.threads = o_.threads;
  if (o_.bpe_dropout > 0) {
    for (const Tokenizer* tok : {&src_tokenizer(), &tgt_tokenizer()})
      if (!tok->is_bpe())
        throw std::invalid_argument("--bpe-dropout needs a BPE vocabulary, and " +
                                    (spm_path_.empty() ? std::string("this run's tokenizer") : spm_path_) +
                                    " is not one (a unigram model, e.g. an imported Marian model's)");
    // The corpus's length limit, eos included, holds for the new segmentations too.
    b.src_dropout = std::make_shared<BpeDropout>(src_tokenizer(), o_.bpe_dropout, o_.max_sentence_tokens - 1);
    b.tgt_dropout = src_tokenizer().checksum() == tgt_tokenizer().checksum()
                        ? b.src_dropout
                        : std::make_shared<BpeDropout>(tgt_tokenizer(), o_.bpe_dropout, o_.max_sentence_tokens - 1);
  }
  batcher_ = std::make_unique<TokenBatcher>(corpora_->shares(), b);
}

// --dtype auto: rank 0 measures (on the first batches of a batcher of its own) and every rank
// follows.
void TrainingRun::choose_dtype() {
  if (o_.dtype != "auto") return;
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
  log_.line("dtype auto: " + reason);
}

void TrainingRun::build_validator() {
  if (o_.valid_src.empty() || !rank0_) return;
  CorpusOptions corpus;
  corpus.max_sentence_tokens = o_.max_sentence_tokens;
  corpus.num_threads = static_cast<int>(o_.threads);
  validator_.emplace(o_.valid_src, o_.valid_tgt, src_tokenizer(), tgt_tokenizer(), corpus, o_.batch_tokens,
                     o_.valid_batch_size, device_, dtype_);
  log_.line("valid: " + validator_->summary());
}

// --output-columns corpus: the columns no training or validation target holds are closed
// (Transformer::close_output_columns); the training step computes only the open ones. A resumed
// run keeps its checkpoint's; the other ranks take rank 0's with its weights (start_from_rank0).
void TrainingRun::choose_output_columns() {
  if (!rank0_ || o_.resume) return;
  const int64_t vocab = model_config_.tgt_vocab_size;
  at::Tensor open = torch::ones({vocab}, torch::kBool);
  std::string why = "every piece (--output-columns all)";
  if (o_.output_columns == "corpus" && o_.bpe_dropout > 0) {
    why = "every piece: BPE-dropout segments the targets anew";
  } else if (o_.output_columns == "corpus" && !model_->fc_out->bias.defined()) {
    why = "every piece: the output layer has no bias to close columns with";
  } else if (o_.output_columns == "corpus") {
    const auto t0 = Clock::now();
    // Each way's targets apart (the reversed corpora's are the source language's pieces).
    std::vector<const PairSource*> forward, reversed;
    const auto shares = corpora_->shares();
    const size_t forward_count = corpora_->forward_shares().size();
    for (size_t k = 0; k < shares.size(); ++k) (k < forward_count ? forward : reversed).push_back(shares[k].source);
    if (validator_) forward.push_back(&validator_->corpus());
    const at::Tensor into_target = target_ids(forward, vocab, model_config_.special_ids());
    const at::Tensor into_source = reversed.empty() ? at::Tensor() : target_ids(reversed, vocab, model_config_.special_ids());
    open = into_source.defined() ? into_target | into_source : into_target;
    if (o_.both_directions) record_direction_columns(into_target, into_source);
    why = "the pieces of the training and validation targets";
    if (!o_.init_from.empty()) {  // fine-tuning never takes a piece away from the model it starts from
      open |= model_->open_output_columns();
      why += " and the columns " + o_.init_from + " has open";
    }
    why += ", found in " + std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s";
  }
  model_->close_output_columns(open);
  log_.line("output columns: " + with_thousands(open.sum().item<int64_t>()) + " of " + with_thousands(vocab) + " open (" +
            why + ")");
}

// --both-directions: the columns of each way, which translation then keeps to (ModelLanguages::
// target_columns): the forward targets' pieces (with the validation targets') and the reversed
// ones'. Fine-tuning adds those of the model it starts from, and records none when that model
// has none for the same languages: it would take pieces away from it.
void TrainingRun::record_direction_columns(const at::Tensor& into_target, const at::Tensor& into_source) {
  std::vector<int64_t> target = column_ids(into_target), source = column_ids(into_source);
  if (!o_.init_from.empty()) {
    const auto [init_target, init_source] = init_columns_;
    if (init_target.empty() || init_source.empty() || init_languages_ != run_languages(o_, init_languages_)) return;
    const auto merge = [](std::vector<int64_t>& into, const std::vector<int64_t>& more) {
      std::vector<int64_t> both;
      std::set_union(into.begin(), into.end(), more.begin(), more.end(), std::back_inserter(both));
      into = std::move(both);
    };
    merge(target, init_target);
    merge(source, init_source);
  }
  meta_.target_columns = std::move(target);
  meta_.source_columns = std::move(source);
  log_.line("output columns by direction: " + with_thousands(static_cast<int64_t>(meta_.target_columns.size())) +
            " into the target language, " + with_thousands(static_cast<int64_t>(meta_.source_columns.size())) +
            " into the source language (translation keeps to them)");
}

// What every checkpoint records besides the weights.
void TrainingRun::describe_run() {
  meta_.model = model_config_;
  meta_.train_config = o_.to_config().to_yaml();
  meta_.src_spm_path = meta_.tgt_spm_path = fs::absolute(spm_path_).string();
  meta_.src_spm_checksum = src_tokenizer().checksum();
  meta_.tgt_spm_checksum = tgt_tokenizer().checksum();
  meta_.src_spm_model = src_tokenizer().serialized();
  if (tgt_tokenizer().serialized() != src_tokenizer().serialized()) meta_.tgt_spm_model = tgt_tokenizer().serialized();
  std::tie(meta_.source_language, meta_.target_language) = run_languages(o_, init_languages_);
  meta_.both_directions = o_.both_directions;
}

void TrainingRun::learn_languages() {
  if (!rank0_ || (meta_.source_language.empty() && meta_.target_language.empty())) return;
  const std::string direction = (meta_.source_language.empty() ? "?" : meta_.source_language) + " -> " +
                                (meta_.target_language.empty() ? "?" : meta_.target_language);
  // A resumed run keeps the identifier its checkpoint holds for the same languages: learning it
  // again decodes up to 100,000 pairs.
  if (resumed_identifier_ && !resumed_identifier_->empty()) {
    meta_.language_identifier = *resumed_identifier_;
    log_.line("languages: " + direction + ", identifier from the resumed checkpoint");
    return;
  }
  const auto t0 = Clock::now();
  const LanguageIdentifier identifier = learn_corpus_languages(corpora_->forward_shares(), src_tokenizer(), tgt_tokenizer(),
                                                               meta_.source_language, meta_.target_language, 100000);
  meta_.language_identifier = identifier.serialize();
  log_.line("languages: " + direction + ", identifier learned in " +
            std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()).substr(0, 4) + " s");
}

// --resume (rank 0): checkpoint_last.pt, or when it is damaged the newest numbered checkpoint
// that verifies. Before it: fp16's loss scale joins the optimizer state (so a resume restores
// it), and what an interrupted run left half-written is removed.
void TrainingRun::resume() {
  if (dtype_ == c10::ScalarType::Half) start_loss_scaling(optimizer_->state(), device_);
  if (const int64_t stale = rank0_ ? checkpoints_.remove_stale_temporaries() : 0; stale > 0)
    log_.line("removed " + std::to_string(stale) + " temporary file(s) left by an interrupted run in " + o_.out);
  if (!o_.resume || !rank0_) return;
  std::vector<std::string> candidates = checkpoints_.numbered();
  candidates.push_back(checkpoints_.last_path());
  std::string resumed_from, damage;
  CheckpointMeta saved;
  for (auto it = candidates.rbegin(); it != candidates.rend() && resumed_from.empty(); ++it) {
    try {
      // The run wrote these itself: one that is empty or not an archive at all is damaged too.
      std::ifstream head(*it, std::ios::binary);
      char magic[4] = {};
      if (!head.read(magic, 4) || std::string(magic, 4) != std::string("PK\x03\x04", 4))
        throw DamagedFileError("checkpoint " + *it + " is empty or not a checkpoint archive (damaged)");
      saved = restore_training_state(*it, model_, optimizer_->state());
      resumed_from = *it;
    } catch (const DamagedFileError& e) {
      if (damage.empty()) damage = e.what();
    }
  }
  if (resumed_from.empty()) throw DamagedFileError(damage + "; no numbered checkpoint verifies either");
  if (!damage.empty()) log_.line("warning: " + damage + ": resuming from " + resumed_from + " instead");
  if (saved.src_spm_checksum != src_tokenizer().checksum())
    throw std::runtime_error("--resume: tokenizer " + spm_path_ + " differs from the one the run started with");
  position_ = saved.position;
  if (saved.source_language == meta_.source_language && saved.target_language == meta_.target_language)
    resumed_identifier_ = saved.language_identifier;
  meta_.target_columns = saved.target_columns;  // chosen when the run started
  meta_.source_columns = saved.source_columns;
  try {
    batcher_->seek(position_.epoch, position_.batch_index);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--resume: " + resumed_from + " stopped at epoch " + std::to_string(position_.epoch) +
                                " batch " + std::to_string(position_.batch_index) + ", which this corpus and --batch-tokens "
                                "do not have (" + e.what() + "): resume with the run's own data and batch settings");
  }
  log_.line("resumed " + resumed_from + " at step " + std::to_string(position_.step) + ", epoch " +
            std::to_string(position_.epoch) + " batch " + std::to_string(position_.batch_index));
}

// Every rank starts from rank 0's weights, optimizer state and position (whatever the others
// initialised or could read), so a job may resume on a different number of workers; then the
// gradient reducer.
void TrainingRun::start_from_rank0() {
  if (group_) {
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
    const auto bucket_bytes = static_cast<int64_t>(o_.bucket_mb * 1024 * 1024);
    reducer_ = std::make_unique<GradientReducer>(unique_parameters(*model_), *group_, bucket_bytes,
                                                 o_.overlap_allreduce, std::min<int64_t>(bucket_bytes, 1 << 20));
  }
  seconds_before_ = position_.train_seconds;
}

// config.yaml and the lines that say what the run is.
void TrainingRun::report_set_up() {
  if (rank0_)
    atomic_write(o_.out + "/config.yaml",
                 seal_text("# effective configuration of this run (torchmt train --config " + o_.out +
                           "/config.yaml); the last line is its checksum: delete it after editing by hand\n" +
                           meta_.train_config));
  // (With --init-from the model is the checkpoint's, whatever --preset says.)
  const std::string model_name = o_.init_from.empty() ? o_.preset : "of " + o_.init_from;
  log_.line("model " + model_name + ": " + std::to_string(count_parameters(model_)) + " parameters, " +
            with_thousands(batcher_->batches_per_epoch()) + " batches/epoch (padding " +
            std::to_string(100 * batcher_->padding_fraction()).substr(0, 4) + "%" +
            (batcher_->windows_per_epoch() > 1
                 ? ", " + std::to_string(batcher_->windows_per_epoch()) + " windows of " +
                       with_thousands(o_.shuffle_window) + " pairs"
                 : std::string()) +
            "), device " + device_.str() + ", " + dtype_name(dtype_) + ", " +
            std::to_string(torch::get_num_threads()) + " threads");
  if (group_)
    log_.line("gradient all-reduce: " + std::to_string(reducer_->bytes() / 1024) + " KiB per update in " +
              std::to_string(reducer_->buckets()) + " bucket(s), " +
              (o_.overlap_allreduce ? "overlapped with backward" : "after backward") + "; global batch " +
              std::to_string(group_->size()) + " x " + std::to_string(o_.batch_tokens) + " tokens x " +
              std::to_string(o_.update_freq));
}

// The moving average on every rank; metrics.csv, the log and the checkpoints on rank 0 (the others'
// log is quiet).
void TrainingRun::add_observers() {
  if (ema_) {
    ema_observer_ = std::make_unique<MovingAverageObserver>(*ema_);
    observers_.push_back(ema_observer_.get());
  }
  if (rank0_) {
    metrics_ = std::make_unique<MetricsObserver>(o_.out, position_.step);
    observers_.push_back(metrics_.get());
    // --average-best: the kept weights of earlier validations, with their BLEU from metrics.csv.
    std::vector<std::pair<int64_t, double>> validated;
    for (const auto& r : metrics_->records()) validated.emplace_back(r.step, r.valid_bleu);
    checkpoints_.recall_top(validated);
  }
  observers_.push_back(&log_);
  if (rank0_) {
    checkpoint_writer_ = std::make_unique<CheckpointObserver>(checkpoints_, model_, optimizer_->state(), meta_, ema_.get());
    observers_.push_back(checkpoint_writer_.get());
  }
}

}  // namespace torchmt
