#pragma once
// Which language is a text in? torchmt's own identifier, learned from the training corpora's two
// sides and kept in the checkpoint (no model download): a multinomial naive Bayes over hashed
// features of each word — its character 1- to 5-grams with word boundaries and the word itself —
// as py3langid / langid.py do, restricted to the languages a model knows.
//
// And what a model says of its languages: ModelLanguages (the codes a checkpoint or export
// carries, with their identifier) and language_name() (LibreTranslate's English names).
// Light header: no LibTorch.
#include <cstdint>
#include <string>
#include <vector>

namespace torchmt {

struct LanguageGuess {
  std::string language;     // its code ("de")
  double confidence = 0;    // percent, as LibreTranslate answers it; a text's guesses sum to 100
};

class LanguageIdentifier {
 public:
  // Knows no language until learn().
  LanguageIdentifier() = default;

  // Learns `code`'s profile from its texts (a language learned again is replaced).
  void learn(const std::string& code, const std::vector<std::string>& texts);
  // Languages known, in the order learned.
  std::vector<std::string> languages() const;
  bool empty() const { return profiles_.empty(); }
  bool knows(const std::string& code) const;

  // Every known language, most likely first. A text without letters gets them all at 0%.
  std::vector<LanguageGuess> detect(const std::string& text) const;
  // The most likely language; "" when none is known.
  std::string best(const std::string& text) const;

  // The languages of `other` this one does not know join it.
  void merge(const LanguageIdentifier& other);

  std::string serialize() const;
  // std::runtime_error ("a corrupt language identifier: ...") for bytes serialize() did not write.
  static LanguageIdentifier deserialize(const std::string& bytes);

 private:
  struct Profile {
    std::string code;
    std::vector<float> log_probs;  // per hashed feature
  };
  std::vector<Profile> profiles_;
};

// The languages of a model: what it translates from and into, and how it tells languages apart.
// Empty fields: a model trained before torchmt recorded them (the server's flags supply them).
struct ModelLanguages {
  std::string source, target;
  LanguageIdentifier identifier;
  bool both_directions = false;  // trained on the reversed pairs too: also translates target -> source
  // Such a model's output pieces for each way, sorted ids (special ids included): those of the
  // target language's training text (source -> target) and of the source language's. Empty: not
  // recorded (one direction, --output-columns all, an export, a model trained before they were).
  std::vector<int64_t> target_columns, source_columns;
};

// English name of an ISO 639-1 code ("de" -> "German"); the code itself when unknown.
std::string language_name(const std::string& code);
// Whether `code` is an ISO 639-1 code torchmt names.
bool known_language_code(const std::string& code);
// The language a file's name says, by its last suffix before .gz ("train.de.gz" -> "de"); "" when
// the suffix is not a known language code.
std::string language_of_file_name(const std::string& path);
// std::invalid_argument naming `what` unless `code` looks like a language code (2-3 lower-case
// letters, an optional region: "pt-BR", "zh-Hans").
void check_language_code(const std::string& code, const std::string& what);

}  // namespace torchmt
