#include "decoding/translation_dtype.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace torchmt {
namespace {

// Sentences of the length translation jobs usually have (Multi30k-like, 8-16 words); the
// language only matters for the length of what comes out.
const std::vector<std::string>& probe_sentences() {
  static const std::vector<std::string> lines = {
      "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt ein Fenster.",
      "Zwei Kinder spielen am Strand mit einem roten Ball.",
      "Eine Frau mit Sonnenbrille fährt mit dem Fahrrad durch die belebte Stadt.",
      "Mehrere Leute sitzen vor einem Café und unterhalten sich.",
      "Ein brauner Hund rennt über eine grüne Wiese.",
      "Ein Junge springt von einem Felsen in einen See.",
      "Eine Gruppe von Musikern spielt auf einer Bühne vor vielen Zuschauern.",
      "Ein älterer Mann liest auf einer Parkbank die Zeitung.",
      "The young woman in a red coat is waiting for the bus in the rain.",
      "A man is cooking dinner in a small kitchen while his children watch.",
      "Zwei Arbeiter reparieren eine Straße in der Nähe eines großen Gebäudes.",
      "Ein Mädchen mit langen Haaren malt ein Bild an einer Wand.",
  };
  return lines;
}

}  // namespace

DtypeChoice choose_translation_dtype(Translator& translator, const TranslationOptions& options) {
  std::vector<std::string> lines;
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(options.batch_size, 12, 48));
  while (lines.size() < want) lines.push_back(probe_sentences()[lines.size() % probe_sentences().size()]);
  // One answer per machine and model, whatever the job: `translate`, `evaluate` and `serve` of one
  // model then decode in the same precision (and give the same strings). Greedy and beam search
  // have come out on the same side (tools/bench/DECISIONS.md).
  const std::string key = "translate|" + std::to_string(std::hash<std::string>{}(translator.config().to_json()));
  auto sentences_per_second = [&](c10::ScalarType dtype) {
    translator.set_dtype(dtype);
    translator.translate(lines, options);  // warm-up: kernels, caches, the worker pool
    // At least two passes and 0.3 s, so that timer granularity and one-off costs do not decide.
    int64_t passes = 0;
    double seconds = 0;
    const auto start = std::chrono::steady_clock::now();
    while (passes < 2 || seconds < 0.3) {
      translator.translate(lines, options);
      ++passes;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return static_cast<double>(passes * static_cast<int64_t>(lines.size())) / seconds;
  };
  const DtypeChoice choice =
      choose_dtype_by_measuring(translator.device(), key, sentences_per_second, "sentences/s translating");
  translator.set_dtype(choice.dtype, choice.reason);
  return choice;
}

}  // namespace torchmt
