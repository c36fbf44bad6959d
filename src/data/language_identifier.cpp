#include "torchmt/data/language_identifier.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

#include "util/utf8.h"

namespace torchmt {
namespace {

// 2^18 features per language: fewer cost snippet accuracy in tools/bench/langid.py, more only size.
constexpr uint32_t kIdentifierBuckets = 1u << 18;
constexpr int kIdentifierMaxOrder = 5;
// Additive smoothing of a feature's count: 0.01 to 0.5 differ by 0.05 points on val snippets.
constexpr double kIdentifierSmoothing = 0.05;
constexpr char kIdentifierMagic[] = "torchmt-langid-1";

char32_t lower_letter(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;                        // Latin-1
  if (c >= 0x100 && c <= 0x17F && (c % 2 == 0) && c != 0x130 && c != 0x138) return c + 1;  // Latin Extended-A
  if (c >= 0x391 && c <= 0x3A9) return c + 32;                                     // Greek
  if (c >= 0x410 && c <= 0x42F) return c + 32;                                     // Cyrillic
  return c;
}

// Letters of every script, roughly: what is not ASCII punctuation, a digit, a space or a symbol
// of the Latin-1 and general punctuation blocks.
bool is_word_letter(char32_t c) {
  if (c < 0x80) return (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z');
  if (c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA;
  if (c == 0xD7 || c == 0xF7) return false;
  if (c >= 0x2000 && c <= 0x2BFF) return false;  // punctuation, symbols, arrows, shapes
  if (c >= 0x3000 && c <= 0x303F) return false;  // CJK punctuation
  if (c >= 0xFF00 && c <= 0xFF20) return false;  // full-width punctuation and digits
  if (c >= 0xFE00 && c <= 0xFE0F) return false;  // variation selectors
  if (c >= 0xFFF0 && c <= 0xFFFF) return false;  // specials (U+FFFD for bytes that were not UTF-8)
  if (c >= 0x1F000) return false;                // emoji and other symbols
  return true;
}

uint32_t fnv_mix(uint32_t h, uint32_t v) { return (h ^ v) * 16777619u; }

// Each word of `text` (letters, and apostrophes between them), lower-cased.
std::vector<std::u32string> identifier_words(const std::string& text) {
  std::vector<std::u32string> words;
  const std::u32string cps = decode_utf8(text).value_or(decode_utf8(replace_invalid_utf8(text)).value_or(U""));
  std::u32string word;
  for (size_t i = 0; i <= cps.size(); ++i) {
    const char32_t c = i < cps.size() ? cps[i] : U' ';
    const bool apostrophe = (c == U'\'' || c == 0x2019) && !word.empty() && i + 1 < cps.size() && is_word_letter(cps[i + 1]);
    if (is_word_letter(c) || apostrophe) {
      word += lower_letter(c);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  return words;
}

// The hashed features of a text: each word's character n-grams (orders 1..5, the word between
// boundary marks) and the word itself. `words` receives the word count.
std::vector<uint32_t> identifier_features(const std::string& text, size_t* words = nullptr) {
  std::vector<uint32_t> features;
  const auto ws = identifier_words(text);
  if (words) *words = ws.size();
  for (const auto& w : ws) {
    std::u32string padded = U" " + w + U" ";
    for (size_t begin = 0; begin < padded.size(); ++begin) {
      uint32_t h = 2166136261u;
      for (int n = 1; n <= kIdentifierMaxOrder && begin + static_cast<size_t>(n) <= padded.size(); ++n) {
        h = fnv_mix(h, static_cast<uint32_t>(padded[begin + static_cast<size_t>(n) - 1]));
        if (n == 1 && padded[begin] == U' ') continue;  // the boundary alone says nothing
        features.push_back(fnv_mix(h, static_cast<uint32_t>(n)) % kIdentifierBuckets);
      }
    }
    uint32_t h = 2166136261u ^ 0x9E3779B9u;  // the whole word: a feature of its own
    for (char32_t c : w) h = fnv_mix(h, static_cast<uint32_t>(c));
    features.push_back(h % kIdentifierBuckets);
  }
  return features;
}

void put_identifier_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

uint32_t get_identifier_u32(const std::string& in, size_t& at) {
  if (at + 4 > in.size()) throw std::runtime_error("a corrupt language identifier: truncated");
  uint32_t v;
  std::memcpy(&v, in.data() + at, 4);
  at += 4;
  return v;
}

}  // namespace

void LanguageIdentifier::learn(const std::string& code, const std::vector<std::string>& texts) {
  std::vector<double> counts(kIdentifierBuckets, 0.0);
  double total = 0;
  for (const auto& text : texts)
    for (uint32_t f : identifier_features(text)) {
      counts[f] += 1;
      total += 1;
    }
  Profile profile{code, std::vector<float>(kIdentifierBuckets)};
  const double denominator = std::log(total + kIdentifierSmoothing * kIdentifierBuckets);
  for (uint32_t b = 0; b < kIdentifierBuckets; ++b)
    profile.log_probs[b] = static_cast<float>(std::log(counts[b] + kIdentifierSmoothing) - denominator);
  for (auto& p : profiles_)
    if (p.code == code) {
      p = std::move(profile);
      return;
    }
  profiles_.push_back(std::move(profile));
}

std::vector<std::string> LanguageIdentifier::languages() const {
  std::vector<std::string> codes;
  for (const auto& p : profiles_) codes.push_back(p.code);
  return codes;
}

bool LanguageIdentifier::knows(const std::string& code) const {
  return std::any_of(profiles_.begin(), profiles_.end(), [&](const Profile& p) { return p.code == code; });
}

std::vector<LanguageGuess> LanguageIdentifier::detect(const std::string& text) const {
  if (profiles_.empty()) return {};
  size_t words = 0;
  const auto features = identifier_features(text, &words);
  std::vector<LanguageGuess> guesses;
  if (features.empty()) {
    for (const auto& p : profiles_) guesses.push_back({p.code, 0.0});
    return guesses;
  }
  // Naive Bayes multiplies the n-grams of one word as if independent: dividing the log-
  // likelihoods by the features per word makes each word one observation, so the confidence is
  // not 100% for every text of three words.
  const double temperature = static_cast<double>(features.size()) / static_cast<double>(words);
  std::vector<double> scores;
  for (const auto& p : profiles_) {
    double s = 0;
    for (uint32_t f : features) s += p.log_probs[f];
    scores.push_back(s / temperature);
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double sum = 0;
  for (auto& s : scores) sum += (s = std::exp(s - top));
  for (size_t i = 0; i < profiles_.size(); ++i)
    guesses.push_back({profiles_[i].code, std::round(scores[i] / sum * 1e4) / 1e2});
  std::stable_sort(guesses.begin(), guesses.end(),
                   [](const LanguageGuess& a, const LanguageGuess& b) { return a.confidence > b.confidence; });
  return guesses;
}

std::string LanguageIdentifier::best(const std::string& text) const {
  const auto guesses = detect(text);
  return guesses.empty() ? std::string() : guesses.front().language;
}

void LanguageIdentifier::merge(const LanguageIdentifier& other) {
  for (const auto& p : other.profiles_)
    if (!knows(p.code)) profiles_.push_back(p);
}

std::string LanguageIdentifier::serialize() const {
  std::string out(kIdentifierMagic, sizeof(kIdentifierMagic) - 1);
  put_identifier_u32(out, kIdentifierBuckets);
  put_identifier_u32(out, static_cast<uint32_t>(profiles_.size()));
  for (const auto& p : profiles_) {
    put_identifier_u32(out, static_cast<uint32_t>(p.code.size()));
    out += p.code;
    out.append(reinterpret_cast<const char*>(p.log_probs.data()), p.log_probs.size() * sizeof(float));
  }
  return out;
}

LanguageIdentifier LanguageIdentifier::deserialize(const std::string& bytes) {
  const size_t magic = sizeof(kIdentifierMagic) - 1;
  if (bytes.compare(0, magic, kIdentifierMagic) != 0) throw std::runtime_error("a corrupt language identifier: not torchmt's format");
  size_t at = magic;
  if (get_identifier_u32(bytes, at) != kIdentifierBuckets)
    throw std::runtime_error("a corrupt language identifier: another number of features than " + std::to_string(kIdentifierBuckets));
  const uint32_t count = get_identifier_u32(bytes, at);
  if (count > 1000) throw std::runtime_error("a corrupt language identifier: " + std::to_string(count) + " languages");
  LanguageIdentifier identifier;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t length = get_identifier_u32(bytes, at);
    if (length == 0 || length > 16 || at + length > bytes.size())
      throw std::runtime_error("a corrupt language identifier: a language code of " + std::to_string(length) + " bytes");
    Profile p{bytes.substr(at, length), std::vector<float>(kIdentifierBuckets)};
    at += length;
    check_language_code(p.code, "a language identifier's language");
    if (at + kIdentifierBuckets * sizeof(float) > bytes.size()) throw std::runtime_error("a corrupt language identifier: truncated");
    std::memcpy(p.log_probs.data(), bytes.data() + at, kIdentifierBuckets * sizeof(float));
    at += kIdentifierBuckets * sizeof(float);
    for (float v : p.log_probs)
      if (!std::isfinite(v) || v > 0) throw std::runtime_error("a corrupt language identifier: a probability above 1");
    if (identifier.knows(p.code)) throw std::runtime_error("a corrupt language identifier: " + p.code + " twice");
    identifier.profiles_.push_back(std::move(p));
  }
  if (at != bytes.size()) throw std::runtime_error("a corrupt language identifier: trailing bytes");
  return identifier;
}

namespace {

// ISO 639-1 codes with their English names: the languages of LibreTranslate / Argos Translate
// and of the OPUS-MT models a torchmt user may train.
const std::unordered_map<std::string, std::string>& iso_language_names() {
  static const std::unordered_map<std::string, std::string> names = {
      {"af", "Afrikaans"}, {"ar", "Arabic"},     {"az", "Azerbaijani"}, {"be", "Belarusian"}, {"bg", "Bulgarian"},
      {"bn", "Bengali"},   {"bs", "Bosnian"},    {"ca", "Catalan"},     {"cs", "Czech"},      {"cy", "Welsh"},
      {"da", "Danish"},    {"de", "German"},     {"el", "Greek"},       {"en", "English"},    {"eo", "Esperanto"},
      {"es", "Spanish"},   {"et", "Estonian"},   {"eu", "Basque"},      {"fa", "Persian"},    {"fi", "Finnish"},
      {"fr", "French"},    {"ga", "Irish"},      {"gl", "Galician"},    {"he", "Hebrew"},     {"hi", "Hindi"},
      {"hr", "Croatian"},  {"hu", "Hungarian"},  {"hy", "Armenian"},    {"id", "Indonesian"}, {"is", "Icelandic"},
      {"it", "Italian"},   {"ja", "Japanese"},   {"ka", "Georgian"},    {"kk", "Kazakh"},     {"ko", "Korean"},
      {"ky", "Kyrgyz"},    {"lt", "Lithuanian"}, {"lv", "Latvian"},     {"mk", "Macedonian"}, {"ms", "Malay"},
      {"mt", "Maltese"},   {"nb", "Norwegian"},  {"nl", "Dutch"},       {"no", "Norwegian"},  {"pl", "Polish"},
      {"pt", "Portuguese"}, {"ro", "Romanian"},  {"ru", "Russian"},     {"sk", "Slovak"},     {"sl", "Slovenian"},
      {"sq", "Albanian"},  {"sr", "Serbian"},    {"sv", "Swedish"},     {"sw", "Swahili"},    {"ta", "Tamil"},
      {"th", "Thai"},      {"tl", "Tagalog"},    {"tr", "Turkish"},     {"uk", "Ukrainian"},  {"ur", "Urdu"},
      {"uz", "Uzbek"},     {"vi", "Vietnamese"}, {"zh", "Chinese"}};
  return names;
}

}  // namespace

std::string language_name(const std::string& code) {
  const auto& names = iso_language_names();
  const auto it = names.find(code);
  if (it != names.end()) return it->second;
  const auto dash = code.find('-');
  if (dash != std::string::npos && names.count(code.substr(0, dash)))
    return names.at(code.substr(0, dash)) + " (" + code.substr(dash + 1) + ")";
  return code;
}

bool known_language_code(const std::string& code) { return iso_language_names().count(code) > 0; }

std::string language_of_file_name(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  const auto dot = name.find_last_of('.');
  if (dot == std::string::npos) return "";
  const std::string suffix = name.substr(dot + 1);
  return known_language_code(suffix) ? suffix : "";
}

void check_language_code(const std::string& code, const std::string& what) {
  auto lower_letters = [](const std::string& s, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i)
      if (s[i] < 'a' || s[i] > 'z') return false;
    return true;
  };
  const auto dash = code.find('-');
  const size_t base = dash == std::string::npos ? code.size() : dash;
  bool ok = base >= 2 && base <= 3 && lower_letters(code, 0, base);
  if (ok && dash != std::string::npos) {
    const size_t region = code.size() - dash - 1;
    ok = region >= 2 && region <= 8;
    for (size_t i = dash + 1; ok && i < code.size(); ++i) ok = std::isalnum(static_cast<unsigned char>(code[i])) != 0;
  }
  if (!ok)
    throw std::invalid_argument(what + " '" + code.substr(0, 40) +
                                "' is not a language code (ISO 639: 2-3 lower-case letters, e.g. de, en, pt-BR)");
}

}  // namespace torchmt
