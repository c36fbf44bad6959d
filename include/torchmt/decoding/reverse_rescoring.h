#pragma once
// Reranking a beam's hypotheses with the reverse direction (inverse-model rescoring of WMT
// systems; fairseq's noisy channel without the language model): each hypothesis h of source x
// scores score(h | x) + weight * score(x | h), the second by a model that translates the other
// way, under the same length penalty. A model trained with --both-directions is its own
// reverse model.
#include <functional>
#include <string>
#include <vector>

#include "torchmt/decoding/translation_options.h"

namespace torchmt {

class Translator;
struct Translation;
struct LineSteering;

struct ReverseRescoring {
  double weight = 0.0;        // 0: off
  std::string reverse_model;  // a checkpoint or export translating target to source; empty: the model itself
  bool enabled() const { return weight != 0.0; }
  // std::invalid_argument naming the flag (a weight needs a beam to rerank).
  void validate(const SearchOptions& search) const;
};

const OptionTable<ReverseRescoring>& reverse_rescoring_option_table();

// Why `reverse` cannot score `forward`'s reverse direction, "" when it can: null `reverse` means
// `forward` itself, which must record both directions; another model must translate the other
// way ("translates de to en, not en to de"), unless either records no languages.
std::string reverse_problem(const Translator& forward, const Translator* reverse);

// translate() with every line's beam (options.search.beam_size hypotheses) reranked by
// forward score + weight * reverse score, cut to options.search.nbest, best first; each
// hypothesis's score is the combined one. `reverse` may be `forward` itself. Weight 0: plain
// forward.translate().
std::vector<Translation> translate_rescored(Translator& forward, Translator& reverse, double weight,
                                            const std::vector<std::string>& lines, const TranslationOptions& options,
                                            const std::function<void(int64_t)>& done = {},
                                            const std::vector<LineSteering>& steering = {});

}  // namespace torchmt
