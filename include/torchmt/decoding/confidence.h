#pragma once
// How sure the model is of its translation, per word and per sentence (Bergamot's quality
// estimation). The raw estimate is the model's own probabilities: a word's confidence is the
// geometric mean of its pieces' probabilities, exp(mean piece log-probability), a sentence's that
// of all its pieces (eos included). A calibrated estimate maps a few such features through
// logistic regressions fitted on held-out pairs (evaluation/confidence_fit.h): for a word, the
// probability that it appears in a reference translation; for a sentence, its expected chrF / 100.
#include <string>
#include <vector>

#include "torchmt/decoding/forced_decoding.h"
#include "torchmt/decoding/translation_options.h"

namespace torchmt {

class Translator;
struct Translation;

struct WordConfidence {
  WordScore score;          // the word, its pieces' log-probabilities
  double confidence = 0.0;  // in [0, 1]
};

struct SentenceConfidence {
  std::vector<WordConfidence> words;
  double mean_log_prob = 0.0;  // per piece, eos included
  double eos_log_prob = 0.0;
  int64_t pieces = 0;          // eos included
  double confidence = 0.0;     // in [0, 1]
};

// A logistic regression over standardised features: sigmoid(w . (x - mean) / scale + bias).
struct LogisticModel {
  std::vector<double> mean, scale, weights;
  double bias = 0.0;
  double predict(const std::vector<double>& features) const;
};

class ConfidenceModel {
 public:
  // The raw estimate (no calibration).
  ConfidenceModel() = default;
  ConfidenceModel(LogisticModel word, LogisticModel sentence);
  // A file fit_confidence wrote (JSON); std::runtime_error naming the file when it is not one.
  static ConfidenceModel load(const std::string& path);
  void save(const std::string& path) const;
  bool calibrated() const { return calibrated_; }
  // The estimate of a target (ids without eos) from its pieces' log-probabilities (eos's last).
  SentenceConfidence estimate(const Tokenizer& tokenizer, const std::vector<int64_t>& tokens,
                              const std::vector<float>& log_probs) const;
  // Sets the confidences of an estimate (another model's, or a raw one) as this model rates it.
  void rate(SentenceConfidence& sentence) const;
  const LogisticModel& word_model() const { return word_; }
  const LogisticModel& sentence_model() const { return sentence_; }

 private:
  bool calibrated_ = false;
  LogisticModel word_, sentence_;
};

// The features the calibrated models read (their order is the file's).
std::vector<double> word_features(const SentenceConfidence& sentence, size_t word);
std::vector<double> sentence_features(const SentenceConfidence& sentence);

// The confidence of given translations (ids without eos, e.g. each line's best hypothesis) of
// `sources`: forced decoding with the translator (the search's own log-probabilities), then the
// estimate.
std::vector<SentenceConfidence> estimate_confidence(Translator& translator, const std::vector<std::string>& sources,
                                                    std::vector<std::vector<int64_t>> targets,
                                                    const TranslationOptions& options, const ConfidenceModel& model);

// The confidence of each translation's best hypothesis (translate()'s output for `sources`); a
// translation without one (an empty line) gets an empty estimate.
std::vector<SentenceConfidence> rate_translations(Translator& translator, const std::vector<std::string>& sources,
                                                  const std::vector<Translation>& translations,
                                                  const TranslationOptions& options, const ConfidenceModel& model);

}  // namespace torchmt
