#include "torchmt/data/sentence_splitter.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "torchmt/util/strings.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

bool is_upper(char32_t c) {
  return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7) ||
         (c >= 0x100 && c <= 0x17F && c % 2 == 0) || (c >= 0x391 && c <= 0x3A9) || (c >= 0x410 && c <= 0x42F);
}
bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }
// Quotes and brackets that may open a sentence (German quotes open with „ or », English with “ or ‘).
bool is_opening(char32_t c) {
  return c == '"' || c == '\'' || c == '(' || c == '[' || c == 0x201E || c == 0x201C || c == 0x2018 ||
         c == 0x201A || c == 0xAB || c == 0xBB || c == 0xBF || c == 0xA1;
}
// ... and close one after its final mark.
bool is_closing(char32_t c) {
  return c == '"' || c == '\'' || c == ')' || c == ']' || c == 0x201D || c == 0x201C || c == 0x2019 ||
         c == 0x2018 || c == 0xAB || c == 0xBB;
}

// Words before a full stop that do not end a sentence.
const std::unordered_set<std::string_view>& abbreviations(bool german) {
  static const std::unordered_set<std::string_view> de{
      "Abs", "Abt", "Adr", "allg", "Anm", "Apr", "Aug", "Bde", "bzgl", "bzw", "ca", "Chr", "Co", "dgl",
      "Di", "Dipl", "Dir", "Do", "Dr", "dt", "Dez", "ebd", "eigtl", "einschl", "engl", "entspr", "etc", "ev", "evtl",
      "Fa", "Feb", "ff", "Fr", "Frl", "geb", "gegr", "gem", "ges", "gest", "ggf", "Hbf", "Hr", "Hrn", "Hrsg", "inkl",
      "Ing", "Jan", "Jh", "Jhd", "Jul", "Jun", "kath", "Kfz", "lt", "max", "Mi", "min", "Mio", "Mo", "Mrd",
      "Mrz", "Nov", "Okt", "op", "Pkw", "Pfd", "Prof", "rd", "Sa", "Sept", "Sep", "So", "sog", "St", "Std",
      "Str", "Tel", "Tsd", "usw", "vgl", "Verf", "Vors", "zzgl", "zit", "ugs", "urspr", "Univ"};
  static const std::unordered_set<std::string_view> en{
      "Adm", "al", "Apr", "approx", "Aug", "Ave", "Bros", "Capt", "cf", "Cmdr", "Co", "Col", "Corp", "Dec", "dept",
      "Dept", "Dr", "est", "etc", "Feb", "figs", "Gen", "Gov", "Hon", "Inc", "Jan", "Jr", "Jul",
      "Jun", "Lt", "Ltd", "Maj", "Mar", "Messrs", "Mr", "Mrs", "Ms", "Mt", "Nov", "Oct", "pp", "Prof",
      "Rep", "Rev", "Sen", "Sep", "Sept", "Sgt", "Sr", "St", "Supt", "vol", "Vol", "vols", "vs"};
  return german ? de : en;
}

// Prefixes that end no sentence only before a number ("Nr. 5", "No. 5", "pp. 12").
bool is_numeric_only(std::string_view word) {
  return word == "Nr" || word == "No" || word == "Nos" || word == "Art" || word == "pp" || word == "S" ||
         word == "Bd" || word == "Kap" || word == "Fig" || word == "Abb";
}

bool all_digits(std::string_view word) {
  return !word.empty() && std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Whether `word` (whitespace-free) can start a sentence: opening quotes or brackets, then an
// upper-case letter or a digit.
bool starts_sentence(std::string_view word) {
  for (size_t i = 0; i < word.size();) {
    size_t n = 0;
    const char32_t c = code_point_at(word, i, &n);
    if (is_opening(c)) {
      i += n;
      continue;
    }
    return is_upper(c) || is_digit(c);
  }
  return false;
}

}  // namespace

std::vector<TextSpan> whitespace_words(std::string_view text) {
  std::vector<TextSpan> words;
  for (size_t i = 0; i < text.size();) {
    while (i < text.size() && is_ascii_space(text[i])) ++i;
    if (i == text.size()) break;
    const size_t begin = i;
    while (i < text.size() && !is_ascii_space(text[i])) ++i;
    words.push_back({begin, i});
  }
  return words;
}

SentenceSplitter::SentenceSplitter(const std::string& language) : language_(language) {
  if (!supports(language))
    throw std::invalid_argument("sentence splitting: no rules for language '" + language + "' (de or en)");
}

std::vector<TextSpan> SentenceSplitter::split(std::string_view text) const {
  const auto words = whitespace_words(text);
  const bool german = language_ == "de";
  std::vector<TextSpan> sentences;
  size_t first = 0;  // the current sentence's first word
  for (size_t w = 0; w < words.size(); ++w) {
    const bool last = w + 1 == words.size();
    bool ends = last;
    if (!last && starts_sentence(text.substr(words[w + 1].begin, words[w + 1].end - words[w + 1].begin))) {
      std::string_view core = text.substr(words[w].begin, words[w].end - words[w].begin);
      for (size_t n = 0; !core.empty();) {  // closing quotes and brackets after the mark
        const char32_t c = code_point_before(core, core.size(), &n);
        if (!is_closing(c)) break;
        core.remove_suffix(n);
      }
      size_t n = 0;
      const char32_t mark = core.empty() ? 0 : code_point_before(core, core.size(), &n);
      if (mark == '?' || mark == '!' || mark == 0x2026) {  // … ends one too
        ends = true;
      } else if (mark == '.') {
        std::string_view prefix = core;
        while (!prefix.empty() && prefix.back() == '.') prefix.remove_suffix(1);
        const bool ellipsis = core.size() - prefix.size() > 1;  // "..." ends a sentence before a capital
        for (size_t k = 0; !prefix.empty();) {
          const char32_t c = code_point_at(prefix, 0, &k);
          if (!is_opening(c)) break;
          prefix.remove_prefix(k);
        }
        const bool inner_stop = prefix.find('.') != std::string_view::npos;  // z.B, U.S, e.g
        const bool initial = prefix.size() == 1 && is_upper(static_cast<unsigned char>(prefix[0]));
        const std::string_view next = text.substr(words[w + 1].begin, words[w + 1].end - words[w + 1].begin);
        if (ellipsis) {
          ends = true;
        } else if (prefix.empty() || inner_stop || initial || abbreviations(german).count(prefix) > 0) {
          ends = false;
        } else if (is_numeric_only(prefix)) {
          ends = !(next[0] >= '0' && next[0] <= '9');
        } else if (all_digits(prefix)) {
          ends = !german;  // German: an ordinal ("am 3. Mai")
        } else {
          ends = true;
        }
      }
    }
    if (ends) {
      sentences.push_back({words[first].begin, words[w].end});
      first = w + 1;
    }
  }
  return sentences;
}

}  // namespace torchmt
