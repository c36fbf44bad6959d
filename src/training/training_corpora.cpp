#include "training/training_corpora.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "util/integrity.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace fs = std::filesystem;

namespace {

// "web.dataset" for "data/web.dataset/" as for "data/web.dataset".
std::string last_component(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

std::vector<CorpusSpec> read_corpus_list(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("--train-data " + path + ": not a readable YAML file (" + e.what() + ")");
  }
  const YAML::Node list = root.IsMap() ? root["corpora"] : root;
  if (!list || !list.IsSequence() || list.size() == 0)
    throw std::invalid_argument("--train-data " + path + ": expected a list of corpora (under `corpora:`)");
  std::vector<CorpusSpec> specs;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    const std::string where = "--train-data " + path + ": corpus " + std::to_string(i + 1);
    if (!entry.IsMap()) throw std::invalid_argument(where + " is not a mapping");
    CorpusSpec spec;
    std::set<std::string> seen;
    try {
      for (const auto& kv : entry) {
        const auto key = kv.first.as<std::string>();
        // yaml-cpp keeps both of a repeated key; the last would silently win.
        if (!seen.insert(key).second) throw std::invalid_argument(where + ": key '" + key + "' given twice");
        if (key == "name") spec.name = kv.second.as<std::string>();
        else if (key == "data") spec.data = kv.second.as<std::string>();
        else if (key == "src") spec.src = kv.second.as<std::string>();
        else if (key == "tgt") spec.tgt = kv.second.as<std::string>();
        else if (key == "weight") spec.weight = kv.second.as<double>();
        else throw std::invalid_argument(where + ": unknown key '" + key + "' (name, data, src, tgt, weight)");
      }
    } catch (const YAML::Exception& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    if (spec.data.empty() == (spec.src.empty() || spec.tgt.empty()))
      throw std::invalid_argument(where + ": give either `data` (a preprocessed dataset) or both `src` and `tgt`");
    if (!entry["weight"]) throw std::invalid_argument(where + ": `weight` is missing (its share of the pairs: a number > 0)");
    if (!(spec.weight > 0) || !std::isfinite(spec.weight))
      throw std::invalid_argument(where + ": `weight` must be a number > 0");
    if (spec.name.empty()) spec.name = last_component(spec.data.empty() ? spec.src : spec.data);
    specs.push_back(spec);
  }
  return specs;
}

}  // namespace

std::vector<CorpusSpec> corpus_specs(const TrainOptions& o) {
  std::vector<CorpusSpec> specs;
  if (o.train_data.empty()) {
    specs.push_back({"train", "", o.train_src, o.train_tgt, 0});
  } else if (fs::is_directory(o.train_data)) {
    specs.push_back({last_component(o.train_data), o.train_data, "", "", 0});
  } else if (fs::exists(o.train_data)) {
    specs = read_corpus_list(o.train_data);
  } else {
    throw std::invalid_argument("--train-data '" + o.train_data + "' not found");
  }
  std::set<std::string> names;
  for (const auto& s : specs) {
    if (s.name.find_first_of(",;=\n") != std::string::npos)
      throw std::invalid_argument("corpus name '" + s.name + "' may not contain , ; or =");
    if (!names.insert(s.name).second)
      throw std::invalid_argument("two corpora are named '" + s.name + "': give each a distinct `name`");
  }
  return specs;
}

std::string dataset_tokenizer(const std::vector<CorpusSpec>& specs) {
  for (const auto& s : specs)
    if (!s.data.empty()) return s.data + "/spm.model";
  return "";
}

TrainingCorpora::TrainingCorpora(const std::vector<CorpusSpec>& specs, const Tokenizer& src_tokenizer,
                                 const Tokenizer& tgt_tokenizer, const std::string& cache_dir, const PreprocessOptions& options,
                                 const std::function<void(const std::string&)>& log, bool both_directions)
    : specs_(specs) {
  if (both_directions && src_tokenizer.checksum() != tgt_tokenizer.checksum())
    throw std::invalid_argument(
        "--both-directions needs one vocabulary for both languages, and this run's source and target tokenizers "
        "differ");
  for (const auto& spec : specs_) {
    std::string how;
    if (spec.data.empty()) {
      datasets_.push_back(cached_dataset(spec.src, spec.tgt, src_tokenizer, tgt_tokenizer, cache_dir, options, how));
    } else {
      datasets_.push_back(BinaryDataset::open(spec.data));
      const auto& m = datasets_.back()->manifest();
      if (const std::string checksum = pair_checksum(src_tokenizer, tgt_tokenizer); m.tokenizer_checksum != checksum)
        throw std::runtime_error("dataset " + spec.data + " was encoded with another SentencePiece model (checksum " +
                                 m.tokenizer_checksum + ", this run's is " + checksum +
                                 "): leave out --spm to use the dataset's, or preprocess it again");
      if (m.max_sentence_tokens > options.corpus.max_sentence_tokens)
        throw std::runtime_error("dataset " + spec.data + " keeps pairs up to " + std::to_string(m.max_sentence_tokens) +
                                 " tokens, more than --max-sentence-tokens " +
                                 std::to_string(options.corpus.max_sentence_tokens) + ": preprocess it again with that limit");
      how = "mapped";
    }
    const auto& m = datasets_.back()->manifest();
    if (log)
      log("corpus " + spec.name + ": " + m.stats.summary() + " (" + how + ", " + datasets_.back()->dir() + ")");
  }
  if (both_directions)
    for (const auto& dataset : datasets_) reversed_.push_back(std::make_unique<ReversedPairs>(*dataset));
}

std::vector<CorpusShare> TrainingCorpora::forward_shares() const {
  std::vector<CorpusShare> shares;
  for (size_t k = 0; k < specs_.size(); ++k) shares.push_back({datasets_[k].get(), specs_[k].weight, specs_[k].name});
  return shares;
}

std::vector<CorpusShare> TrainingCorpora::shares() const {
  std::vector<CorpusShare> shares = forward_shares();
  for (size_t k = 0; k < reversed_.size(); ++k)
    shares.push_back({reversed_[k].get(), specs_[k].weight, specs_[k].name + " reversed"});
  return shares;
}

int64_t TrainingCorpora::pairs() const {
  int64_t n = 0;
  for (const auto& share : shares()) n += share.source->size();
  return n;
}

std::string TrainingCorpora::counts_field(const std::vector<int64_t>& drawn) const {
  const auto all = shares();
  std::string out;
  for (size_t k = 0; k < all.size() && k < drawn.size(); ++k)
    out += (k ? ";" : "") + all[k].name + "=" + std::to_string(drawn[k]);
  return out;
}

std::string TrainingCorpora::counts_text(const std::vector<int64_t>& drawn) const {
  int64_t total = 0;
  for (int64_t d : drawn) total += d;
  const auto all = shares();
  std::string out;
  for (size_t k = 0; k < all.size() && k < drawn.size(); ++k) {
    char share[32];
    std::snprintf(share, sizeof(share), "%.1f%%", total > 0 ? 100.0 * static_cast<double>(drawn[k]) / static_cast<double>(total) : 0.0);
    out += (k ? ", " : "") + all[k].name + " " + with_thousands(drawn[k]) + " (" + share + ")";
  }
  return out;
}

}  // namespace torchmt
