#include "torchmt/decoding/confidence.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "torchmt/data/tokenizer.h"
#include "torchmt/decoding/translator.h"
#include "util/atomic_file.h"
#include "torchmt/util/strings.h"

namespace torchmt {

namespace {

constexpr const char* kFormat = "torchmt-confidence-1";

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// A word without a letter or digit (punctuation): references hold those whatever the model's doubt.
bool punctuation_only(const std::string& word) {
  for (unsigned char c : word)
    if (c >= 0x80 || std::isalnum(c)) return false;
  return true;
}

nlohmann::json to_json(const LogisticModel& m) {
  return {{"mean", m.mean}, {"scale", m.scale}, {"weights", m.weights}, {"bias", m.bias}};
}

LogisticModel from_json(const nlohmann::json& j, size_t features) {
  LogisticModel m;
  m.mean = j.at("mean").get<std::vector<double>>();
  m.scale = j.at("scale").get<std::vector<double>>();
  m.weights = j.at("weights").get<std::vector<double>>();
  m.bias = j.at("bias").get<double>();
  if (m.mean.size() != features || m.scale.size() != features || m.weights.size() != features)
    throw std::runtime_error("expected " + std::to_string(features) + " features");
  for (double s : m.scale)
    if (!(s > 0.0) || !std::isfinite(s)) throw std::runtime_error("a feature scale is not a positive number");
  return m;
}

}  // namespace

double LogisticModel::predict(const std::vector<double>& x) const {
  double z = bias;
  for (size_t i = 0; i < weights.size(); ++i) z += weights[i] * (x[i] - mean[i]) / scale[i];
  return sigmoid(z);
}

ConfidenceModel::ConfidenceModel(LogisticModel word, LogisticModel sentence)
    : calibrated_(true), word_(std::move(word)), sentence_(std::move(sentence)) {}

std::vector<double> word_features(const SentenceConfidence& s, size_t i) {
  const WordScore& w = s.words[i].score;
  const double before = i > 0 ? s.words[i - 1].score.mean_log_prob : s.mean_log_prob;
  const double after = i + 1 < s.words.size() ? s.words[i + 1].score.mean_log_prob : s.eos_log_prob;
  return {w.mean_log_prob,
          w.min_log_prob,
          std::log(static_cast<double>(std::max<int64_t>(1, w.pieces))),
          s.mean_log_prob,
          punctuation_only(w.word) ? 1.0 : 0.0,
          static_cast<double>(i) / static_cast<double>(std::max<size_t>(1, s.words.size())),
          before,
          after};
}

std::vector<double> sentence_features(const SentenceConfidence& s) {
  double least = 0.0, sum = 0.0, doubtful = 0.0;
  for (const auto& w : s.words) {
    least = std::min(least, w.score.mean_log_prob);
    sum += w.score.mean_log_prob;
    doubtful += w.score.mean_log_prob < std::log(0.5) ? 1.0 : 0.0;
  }
  const double words = static_cast<double>(std::max<size_t>(1, s.words.size()));
  return {s.mean_log_prob, least, doubtful / words, std::log(static_cast<double>(std::max<int64_t>(1, s.pieces))),
          s.eos_log_prob, sum / words};
}

SentenceConfidence ConfidenceModel::estimate(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                                             const std::vector<float>& log_probs) const {
  if (log_probs.size() != tokens.size() + 1)
    throw std::invalid_argument("confidence: " + std::to_string(log_probs.size()) + " log-probabilities for " +
                                std::to_string(tokens.size()) + " tokens and eos");
  SentenceConfidence s;
  s.pieces = static_cast<int64_t>(log_probs.size());
  double sum = 0.0;
  for (float lp : log_probs) sum += lp;
  s.mean_log_prob = sum / static_cast<double>(s.pieces);
  s.eos_log_prob = log_probs.back();
  for (auto& w : word_scores(tokenizer, tokens, log_probs)) s.words.push_back({std::move(w), 0.0});
  rate(s);
  return s;
}

void ConfidenceModel::rate(SentenceConfidence& s) const {
  for (size_t i = 0; i < s.words.size(); ++i)
    s.words[i].confidence =
        calibrated_ ? word_.predict(word_features(s, i)) : std::exp(s.words[i].score.mean_log_prob);
  s.confidence = calibrated_ ? sentence_.predict(sentence_features(s)) : std::exp(s.mean_log_prob);
}

ConfidenceModel ConfidenceModel::load(const std::string& path) {
  try {
    const auto j = nlohmann::json::parse(read_file(path));
    if (!j.is_object() || j.value("format", "") != kFormat)
      throw std::runtime_error(std::string("not a confidence model (format ") + kFormat + " expected)");
    SentenceConfidence probe;
    probe.words.emplace_back();
    return ConfidenceModel(from_json(j.at("word"), word_features(probe, 0).size()),
                           from_json(j.at("sentence"), sentence_features(probe).size()));
  } catch (const std::exception& e) {
    throw std::runtime_error("confidence model " + path + ": " + first_line(e.what()));
  }
}

void ConfidenceModel::save(const std::string& path) const {
  if (!calibrated_) throw std::logic_error("the raw confidence estimate has nothing to save");
  const nlohmann::json j = {{"format", kFormat}, {"word", to_json(word_)}, {"sentence", to_json(sentence_)}};
  atomic_write(path, j.dump(1) + "\n");
}

std::vector<SentenceConfidence> estimate_confidence(Translator& translator, const std::vector<std::string>& sources,
                                                    std::vector<std::vector<int64_t>> targets,
                                                    const TranslationOptions& options, const ConfidenceModel& model) {
  const auto scored = translator.score_tokens(sources, std::move(targets), options);
  std::vector<SentenceConfidence> out;
  out.reserve(scored.size());
  for (const auto& p : scored) out.push_back(model.estimate(translator.tgt_tokenizer(), p.tokens, p.log_probs));
  return out;
}

std::vector<SentenceConfidence> rate_translations(Translator& translator, const std::vector<std::string>& sources,
                                                  const std::vector<Translation>& translations,
                                                  const TranslationOptions& options, const ConfidenceModel& model) {
  std::vector<std::string> rated_sources;
  std::vector<std::vector<int64_t>> targets;
  std::vector<size_t> rated;
  std::vector<SentenceConfidence> out(translations.size());
  // The search's own log-probabilities where it kept them: no second decoding. Not with a
  // shortlist, whose search normalised over the shortlist's pieces, not the vocabulary.
  const bool searched = !translator.shortlist();
  for (size_t i = 0; i < translations.size(); ++i) {
    if (translations[i].hypotheses.empty()) continue;
    const Hypothesis& best = translations[i].hypotheses.front();
    if (searched && best.token_log_probs.size() == best.tokens.size() + 1) {
      out[i] = model.estimate(translator.tgt_tokenizer(), best.tokens, best.token_log_probs);
      continue;
    }
    rated_sources.push_back(sources[i]);
    targets.push_back(best.tokens);
    rated.push_back(i);
  }
  if (rated.empty()) return out;
  auto estimates = estimate_confidence(translator, rated_sources, std::move(targets), options, model);
  for (size_t k = 0; k < rated.size(); ++k) out[rated[k]] = std::move(estimates[k]);
  return out;
}

}  // namespace torchmt
