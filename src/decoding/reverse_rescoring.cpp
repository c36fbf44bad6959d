#include "torchmt/decoding/reverse_rescoring.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "torchmt/decoding/translator.h"

namespace torchmt {

const OptionTable<ReverseRescoring>& reverse_rescoring_option_table() {
  using R = ReverseRescoring;
  const OptionExtra decoding{"", "decoding", {}};
  static const auto table = OptionTable<R>("reverse rescoring")
      .add("reverse_weight", &R::weight,
           "rerank the beam by score(translation | source) + W x score(source | translation), the second by "
           "the reverse model (0 = off; needs --beam 2 or more)", decoding)
      .add("reverse_model", &R::reverse_model,
           "checkpoint or export translating the other way, for --reverse-weight (default: the model itself, "
           "which must be trained with --both-directions)", decoding);
  return table;
}

void ReverseRescoring::validate(const SearchOptions& search) const {
  if (!std::isfinite(weight) || weight < 0) throw std::invalid_argument("--reverse-weight must be 0 or more");
  if (enabled() && search.beam_size < 2)
    throw std::invalid_argument("--reverse-weight reranks a beam: give --beam 2 or more");
  if (!reverse_model.empty() && !enabled())
    throw std::invalid_argument("--reverse-model is used by --reverse-weight: give it a weight above 0");
}

std::string reverse_problem(const Translator& forward, const Translator* reverse) {
  const ModelLanguages& f = forward.languages();
  if (reverse == nullptr)
    return f.both_directions ? "" : "the model was not trained with --both-directions, so it cannot score the reverse direction";
  const ModelLanguages& r = reverse->languages();
  if (f.source.empty() || r.source.empty()) return "";  // a model that records none: the user's word
  const bool reverses = (r.source == f.target && r.target == f.source) ||
                        (r.both_directions && r.source == f.source && r.target == f.target);
  if (reverses) return "";
  return "translates " + r.source + " to " + r.target + ", not " + f.target + " to " + f.source;
}

std::vector<Translation> translate_rescored(Translator& forward, Translator& reverse, double weight,
                                            const std::vector<std::string>& lines, const TranslationOptions& options,
                                            const std::function<void(int64_t)>& done,
                                            const std::vector<LineSteering>& steering) {
  ReverseRescoring{weight, {}}.validate(options.search);
  if (weight == 0) return forward.translate(lines, options, done, steering);
  TranslationOptions whole_beam = options;
  whole_beam.search.nbest = whole_beam.search.beam_size;
  whole_beam.search.scores = true;
  auto translations = forward.translate(lines, whole_beam, done, steering);
  // Every hypothesis as the reverse model's source, its line's source as the target.
  std::vector<std::string> hypotheses, sources;
  for (size_t i = 0; i < translations.size(); ++i)
    for (size_t j = 0; j < translations[i].hypotheses.size(); ++j) {
      hypotheses.push_back(translations[i].texts[j]);
      sources.push_back(lines[i]);
    }
  TranslationOptions scoring = options;
  scoring.search.nbest = 1;
  const auto reverse_scores = reverse.score(hypotheses, sources, scoring);
  size_t k = 0;
  for (auto& t : translations) {
    const size_t n = t.hypotheses.size();
    if (n == 0) continue;  // a blank line: its one empty text stays
    for (size_t j = 0; j < n; ++j) t.hypotheses[j].score += weight * reverse_scores[k++].score;
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return t.hypotheses[a].score > t.hypotheses[b].score; });
    order.resize(std::min(n, static_cast<size_t>(options.search.nbest)));
    std::vector<Hypothesis> kept;
    std::vector<std::string> texts;
    for (size_t j : order) {
      kept.push_back(std::move(t.hypotheses[j]));
      texts.push_back(std::move(t.texts[j]));
    }
    t.hypotheses = std::move(kept);
    t.texts = std::move(texts);
  }
  return translations;
}

}  // namespace torchmt
