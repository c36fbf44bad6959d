#pragma once
// What `torchmt evaluate` prints for a scored corpus; shared by both of its modes (scoring an
// existing hypothesis file, and translating first).
#include <ostream>
#include <string>
#include <vector>

namespace torchmt::evaluation {

// Writes four lines:
//   BLEU = 38.21 70.1/46.2/32.0/22.6 (BP = 0.987 ratio = 0.987 hyp_len = 12034 ref_len = 12190)
//   chrF2 = 58.43
//   BLEU signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...
//   chrF2 signature: nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:...
// Returns 0. Throws std::invalid_argument when the sizes differ (callers that know the file
// names should check first and say which files) or a line is not valid UTF-8.
int score_and_print(const std::vector<std::string>& hyps, const std::vector<std::string>& refs, std::ostream& out);

}  // namespace torchmt::evaluation
