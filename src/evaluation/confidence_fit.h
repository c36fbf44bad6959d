#pragma once
// Calibrating and measuring confidence estimates (decoding/confidence.h) against references:
// a word is "wrong" when it does not appear in the reference (case and surrounding punctuation
// ignored), a sentence is as good as its chrF. The calibration is two logistic regressions
// fitted with LibTorch (L-BFGS, standardised features, a small L2 penalty).
#include <string>
#include <vector>

#include "torchmt/decoding/confidence.h"

namespace torchmt {

// Whether each word of a sentence estimate appears among the reference's words.
std::vector<bool> words_in_reference(const SentenceConfidence& sentence, const std::string& reference);

// Fits the word model to "appears in the reference" and the sentence model to sentence chrF / 100
// (a fractional logistic regression), from raw estimates of translations and their references.
// std::invalid_argument when the counts differ or there is too little to fit (fewer than 20
// sentences, or words of one kind only).
ConfidenceModel fit_confidence(const std::vector<SentenceConfidence>& raw, const std::vector<std::string>& hypotheses,
                               const std::vector<std::string>& references);

struct ConfidenceQuality {
  double sentence_spearman = 0.0;  // Spearman's rho of sentence confidence and sentence chrF
  double word_auc = 0.0;           // ROC AUC of (1 - word confidence) for "not in the reference"
  int64_t sentences = 0, words = 0, words_not_in_reference = 0;
};
ConfidenceQuality measure_confidence(const std::vector<SentenceConfidence>& estimates,
                                     const std::vector<std::string>& hypotheses,
                                     const std::vector<std::string>& references);

// Spearman's rank correlation (ties get their mean rank); 0 when either side is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);
// The area under the ROC curve of `scores` for the positive `labels` (Mann-Whitney, ties half);
// 0.5 when one class is empty.
double roc_auc(const std::vector<double>& scores, const std::vector<bool>& labels);

}  // namespace torchmt
