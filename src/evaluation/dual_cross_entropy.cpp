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
                                          const std::function<void(int64_t)>& done, const ContrastSides* contrast) {
  if (sources.size() != targets.size() ||
      (contrast && (contrast->sources.size() != sources.size() || contrast->targets.size() != sources.size())))
    throw std::invalid_argument("dual cross-entropy: " + std::to_string(sources.size()) + " sources for " +
                                std::to_string(targets.size()) + " targets" +
                                (contrast ? " and " + std::to_string(contrast->sources.size()) + " / " +
                                                std::to_string(contrast->targets.size()) + " contrasting sides"
                                          : std::string()));
  const auto f = forward.score(sources, targets, options, done);
  const auto b = backward.score(targets, sources, options, done);
  std::vector<PairScore> fc, bc;
  if (contrast) {
    fc = forward.score(contrast->sources, targets, options, done);
    bc = backward.score(contrast->targets, sources, options, done);
  }
  std::vector<DualScore> out(sources.size());
  for (size_t i = 0; i < out.size(); ++i) {
    DualScore& d = out[i];
    d.forward = cross_entropy(f[i]);
    d.backward = cross_entropy(b[i]);
    d.truncated = f[i].truncated || b[i].truncated;
    if (contrast) {
      d.forward -= cross_entropy(fc[i]);
      d.backward -= cross_entropy(bc[i]);
      d.score = std::exp(d.forward + d.backward);
    } else {
      d.score = std::fabs(d.forward - d.backward) + 0.5 * (d.forward + d.backward);
    }
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
