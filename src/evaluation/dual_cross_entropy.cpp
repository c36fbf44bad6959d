#include "evaluation/dual_cross_entropy.h"

#include <cmath>
#include <stdexcept>

namespace torchmt {

namespace {

double cross_entropy(const PairScore& p) {
  return -p.log_prob / static_cast<double>(std::max<size_t>(1, p.log_probs.size()));
}

double mean_cross_entropy(const std::vector<PairScore>& scores) {
  double sum = 0.0;
  for (const auto& p : scores) sum += cross_entropy(p);
  return scores.empty() ? 0.0 : sum / static_cast<double>(scores.size());
}

}  // namespace

std::vector<DualScore> dual_cross_entropy(Translator& forward, Translator& backward,
                                          const std::vector<std::string>& sources,
                                          const std::vector<std::string>& targets, const TranslationOptions& options,
                                          const std::function<void(int64_t)>& done) {
  if (sources.size() != targets.size())
    throw std::invalid_argument("dual cross-entropy: " + std::to_string(sources.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets");
  const auto f = forward.score(sources, targets, options, done);
  const auto b = backward.score(targets, sources, options, done);
  std::vector<DualScore> out(sources.size());
  for (size_t i = 0; i < out.size(); ++i) {
    DualScore& d = out[i];
    d.forward = cross_entropy(f[i]);
    d.backward = cross_entropy(b[i]);
    d.score = std::fabs(d.forward - d.backward) + 0.5 * (d.forward + d.backward);
    d.truncated = f[i].truncated || b[i].truncated;
  }
  return out;
}

DirectionCheck check_direction(Translator& model, const std::vector<std::string>& sources,
                               const std::vector<std::string>& targets, const TranslationOptions& options) {
  DirectionCheck c;
  c.pairs = static_cast<int64_t>(sources.size());
  c.along = mean_cross_entropy(model.score(sources, targets, options));
  c.against = mean_cross_entropy(model.score(targets, sources, options));
  return c;
}

}  // namespace torchmt
