#include "evaluation/confidence_fit.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "torchmt/evaluation/chrf.h"

namespace torchmt {

namespace {

// Lower-cased (ASCII), without the punctuation around it; a word of punctuation only stays as it is.
std::string normalise_word(const std::string& word) {
  size_t begin = 0, end = word.size();
  auto punct = [](unsigned char c) { return c < 0x80 && std::ispunct(c); };
  while (begin < end && punct(static_cast<unsigned char>(word[begin]))) ++begin;
  while (end > begin && punct(static_cast<unsigned char>(word[end - 1]))) --end;
  std::string out = begin == end ? word : word.substr(begin, end - begin);
  for (auto& c : out)
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double mean_rank = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (size_t k = i; k <= j; ++k) r[order[k]] = mean_rank;
    i = j + 1;
  }
  return r;
}

// Standardised features x [N, F], targets y [N] in [0, 1] -> the fitted model.
LogisticModel fit_logistic(const std::vector<std::vector<double>>& rows, const std::vector<double>& targets) {
  const auto n = static_cast<int64_t>(rows.size()), f = static_cast<int64_t>(rows.front().size());
  LogisticModel m;
  m.mean.assign(static_cast<size_t>(f), 0.0);
  m.scale.assign(static_cast<size_t>(f), 0.0);
  for (const auto& r : rows)
    for (int64_t j = 0; j < f; ++j) m.mean[j] += r[j] / static_cast<double>(n);
  for (const auto& r : rows)
    for (int64_t j = 0; j < f; ++j) m.scale[j] += (r[j] - m.mean[j]) * (r[j] - m.mean[j]) / static_cast<double>(n);
  for (auto& s : m.scale) s = s > 1e-12 ? std::sqrt(s) : 1.0;  // a constant feature: left unscaled
  auto x = torch::empty({n, f}, torch::kDouble);  // [N, F]
  auto xa = x.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) xa[i][j] = (rows[static_cast<size_t>(i)][j] - m.mean[j]) / m.scale[j];
  const auto y = torch::tensor(targets, torch::kDouble);  // [N]
  c10::AutoGradMode grad(true);
  auto w = torch::zeros({f}, torch::dtype(torch::kDouble).requires_grad(true));
  auto b = torch::zeros({1}, torch::dtype(torch::kDouble).requires_grad(true));
  torch::optim::LBFGS lbfgs({w, b}, torch::optim::LBFGSOptions(1.0).max_iter(200).line_search_fn("strong_wolfe"));
  auto closure = [&] {
    lbfgs.zero_grad();
    auto logits = torch::mv(x, w) + b;  // [N]
    auto loss = torch::binary_cross_entropy_with_logits(logits, y) + 1e-3 * w.pow(2).sum();
    loss.backward();
    return loss;
  };
  lbfgs.step(closure);
  const auto wd = w.detach();
  for (int64_t j = 0; j < f; ++j) m.weights.push_back(wd[j].item<double>());
  m.bias = b.detach().item<double>();
  return m;
}

void check_counts(size_t estimates, size_t hypotheses, size_t references) {
  if (estimates != hypotheses || hypotheses != references)
    throw std::invalid_argument("confidence: " + std::to_string(estimates) + " estimates, " +
                                std::to_string(hypotheses) + " translations and " + std::to_string(references) +
                                " references");
}

double sentence_chrf(const std::string& hypothesis, const std::string& reference) {
  return evaluation::corpus_chrf({hypothesis}, {reference}).score;
}

}  // namespace

std::vector<bool> words_in_reference(const SentenceConfidence& sentence, const std::string& reference) {
  std::set<std::string> ref;
  std::istringstream in(reference);
  for (std::string w; in >> w;) ref.insert(normalise_word(w));
  std::vector<bool> out;
  for (const auto& w : sentence.words) out.push_back(ref.count(normalise_word(w.score.word)) > 0);
  return out;
}

ConfidenceModel fit_confidence(const std::vector<SentenceConfidence>& raw, const std::vector<std::string>& hypotheses,
                               const std::vector<std::string>& references) {
  check_counts(raw.size(), hypotheses.size(), references.size());
  std::vector<std::vector<double>> word_rows, sentence_rows;
  std::vector<double> word_targets, sentence_targets;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i].words.empty()) continue;  // a blank line: nothing to learn from
    const auto in_ref = words_in_reference(raw[i], references[i]);
    for (size_t w = 0; w < raw[i].words.size(); ++w) {
      word_rows.push_back(word_features(raw[i], w));
      word_targets.push_back(in_ref[w] ? 1.0 : 0.0);
    }
    sentence_rows.push_back(sentence_features(raw[i]));
    sentence_targets.push_back(sentence_chrf(hypotheses[i], references[i]) / 100.0);
  }
  const auto positives = std::count(word_targets.begin(), word_targets.end(), 1.0);
  if (sentence_rows.size() < 20 || positives == 0 || positives == static_cast<long>(word_targets.size()))
    throw std::invalid_argument("confidence: too little to fit (" + std::to_string(sentence_rows.size()) +
                                " translated sentences, " + std::to_string(positives) + " of " +
                                std::to_string(word_targets.size()) +
                                " words in their references); give at least 20 sentences with words of both kinds");
  return ConfidenceModel(fit_logistic(word_rows, word_targets), fit_logistic(sentence_rows, sentence_targets));
}

ConfidenceQuality measure_confidence(const std::vector<SentenceConfidence>& estimates,
                                     const std::vector<std::string>& hypotheses,
                                     const std::vector<std::string>& references) {
  check_counts(estimates.size(), hypotheses.size(), references.size());
  std::vector<double> sentence_conf, chrf, word_doubt;
  std::vector<bool> not_in_reference;
  for (size_t i = 0; i < estimates.size(); ++i) {
    if (estimates[i].words.empty()) continue;
    sentence_conf.push_back(estimates[i].confidence);
    chrf.push_back(sentence_chrf(hypotheses[i], references[i]));
    const auto in_ref = words_in_reference(estimates[i], references[i]);
    for (size_t w = 0; w < in_ref.size(); ++w) {
      word_doubt.push_back(1.0 - estimates[i].words[w].confidence);
      not_in_reference.push_back(!in_ref[w]);
    }
  }
  ConfidenceQuality q;
  q.sentence_spearman = spearman(sentence_conf, chrf);
  q.word_auc = roc_auc(word_doubt, not_in_reference);
  q.sentences = static_cast<int64_t>(sentence_conf.size());
  q.words = static_cast<int64_t>(word_doubt.size());
  q.words_not_in_reference = std::count(not_in_reference.begin(), not_in_reference.end(), true);
  return q;
}

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("spearman: samples of different sizes");
  if (a.size() < 2) return 0.0;
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(a.size()), mean = (n + 1.0) / 2.0;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0.0;
}

double roc_auc(const std::vector<double>& scores, const std::vector<bool>& labels) {
  if (scores.size() != labels.size()) throw std::invalid_argument("roc_auc: scores and labels of different sizes");
  const auto r = ranks(scores);
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < r.size(); ++i)
    if (labels[i]) {
      positives += 1;
      rank_sum += r[i];
    }
  const double negatives = static_cast<double>(r.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

}  // namespace torchmt
