// generate_corpus: a synthetic parallel corpus for tests and benchmarks at any size, without
// downloading anything. Deterministic from --seed. Sentence lengths follow a log-normal
// distribution (median --median-words: Multi30k has 12, news text about 22), words a Zipf
// distribution over --vocabulary types per language, spelled from syllables; the target is a
// "translation": each source word has a fixed target word, with local reordering, dropped and
// inserted words, so the pairs are learnable and their lengths correlate as real ones do.
//
//   generate_corpus --pairs 10000000 --out /tmp/big   ->  /tmp/big.de, /tmp/big.en
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "util/split_mix.h"

namespace {

using torchmt::SplitMix64;

double normal(SplitMix64& rng) {  // Box-Muller
  const double u = std::max(rng.uniform(), 1e-300), v = rng.uniform();
  return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
}

// Words of one language: Zipf-ranked types spelled from that language's syllables.
class Lexicon {
 public:
  Lexicon(std::vector<std::string> syllables, int64_t types, double zipf, uint64_t seed) {
    SplitMix64 rng{seed};
    words_.reserve(static_cast<size_t>(types));
    for (int64_t i = 0; i < types; ++i) {
      // Frequent words are short, as in real text.
      const int n = 1 + (i >= 50) + (i >= 5000) + (i >= 500 && rng.next() % 2 == 0);
      std::string w;
      for (int s = 0; s < n; ++s) w += syllables[rng.next() % syllables.size()];
      words_.push_back(w);
    }
    cdf_.resize(static_cast<size_t>(types));
    double total = 0;
    for (int64_t i = 0; i < types; ++i) cdf_[static_cast<size_t>(i)] = total += 1.0 / std::pow(static_cast<double>(i + 1), zipf);
    for (auto& c : cdf_) c /= total;
  }
  int64_t draw(SplitMix64& rng) const {
    return static_cast<int64_t>(std::lower_bound(cdf_.begin(), cdf_.end(), rng.uniform()) - cdf_.begin());
  }
  const std::string& word(int64_t i) const { return words_[static_cast<size_t>(i)]; }
  int64_t size() const { return static_cast<int64_t>(words_.size()); }

 private:
  std::vector<std::string> words_;
  std::vector<double> cdf_;
};

void append_sentence(std::string& out, const Lexicon& lex, const std::vector<int64_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string w = lex.word(ids[i]);
    if (i == 0 && !w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 'a' + 'A');
    if (i > 0) out += ' ';
    out += w;
  }
  out += ".\n";
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("generate_corpus", "A deterministic synthetic German-English-like parallel corpus.");
  options.add_options()("pairs", "sentence pairs", cxxopts::value<int64_t>()->default_value("1000000"))(
      "out", "output prefix: PREFIX.de and PREFIX.en", cxxopts::value<std::string>())(
      "seed", "random seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "vocabulary", "word types per language", cxxopts::value<int64_t>()->default_value("200000"))(
      "median-words", "median source sentence length in words", cxxopts::value<double>()->default_value("12"))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  try {
    r = options.parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "generate_corpus: " << e.what() << "\n";
    return 2;
  }
  if (r.count("help") || !r.count("out")) {
    std::cout << options.help() << "\n";
    return r.count("help") ? 0 : 2;
  }
  const int64_t pairs = r["pairs"].as<int64_t>(), types = r["vocabulary"].as<int64_t>();
  const double median = r["median-words"].as<double>();
  if (pairs < 0 || types < 10 || types > 100000000 || !(median >= 1 && median <= 200)) {
    std::cerr << "generate_corpus: --pairs >= 0, --vocabulary in [10, 1e8], --median-words in [1, 200]\n";
    return 2;
  }
  const uint64_t seed = r["seed"].as<uint64_t>();
  const std::string prefix = r["out"].as<std::string>();
  const Lexicon de({"ber", "ge", "schaft", "en", "lich", "ein", "der", "die", "und", "sch", "ung", "keit", "ver",
                    "zu", "auf", "stra", "hau", "mann", "frau", "kind", "ä", "ö", "ü", "ß", "ig", "ten", "heit"},
                   types, 1.05, seed * 3 + 1);
  const Lexicon en({"the", "ing", "tion", "an", "er", "on", "re", "in", "ed", "st", "al", "ly", "man", "wo", "child",
                    "run", "play", "street", "dog", "ca", "ter", "ous", "ble", "pre", "com"},
                   types, 1.05, seed * 3 + 2);
  FILE* out_de = std::fopen((prefix + ".de").c_str(), "w");
  FILE* out_en = std::fopen((prefix + ".en").c_str(), "w");
  if (out_de == nullptr || out_en == nullptr) {
    std::cerr << "generate_corpus: cannot write " << prefix << ".de / .en\n";
    return 1;
  }
  SplitMix64 rng{seed};
  std::string buf_de, buf_en;
  std::vector<int64_t> src, tgt;
  const double mu = std::log(median), sigma = 0.55;
  for (int64_t p = 0; p < pairs; ++p) {
    const auto n = static_cast<int64_t>(std::clamp(std::exp(mu + sigma * normal(rng)), 1.0, 150.0));
    src.clear();
    for (int64_t i = 0; i < n; ++i) src.push_back(de.draw(rng));
    // The "translation": a fixed word map (rank-preserving, so frequent maps to frequent),
    // 8% dropped, 10% with an extra function word, adjacent swaps.
    tgt.clear();
    for (int64_t w : src) {
      if (rng.uniform() < 0.08) continue;
      tgt.push_back(w);
      if (rng.uniform() < 0.10) tgt.push_back(static_cast<int64_t>(rng.next() % 20));
    }
    if (tgt.empty()) tgt.push_back(src[0]);
    for (size_t i = 1; i < tgt.size(); ++i)
      if (rng.uniform() < 0.12) std::swap(tgt[i - 1], tgt[i]);
    append_sentence(buf_de, de, src);
    append_sentence(buf_en, en, tgt);
    if (buf_de.size() > (1 << 22)) {
      std::fwrite(buf_de.data(), 1, buf_de.size(), out_de);
      std::fwrite(buf_en.data(), 1, buf_en.size(), out_en);
      buf_de.clear();
      buf_en.clear();
    }
  }
  std::fwrite(buf_de.data(), 1, buf_de.size(), out_de);
  std::fwrite(buf_en.data(), 1, buf_en.size(), out_en);
  const bool ok = std::ferror(out_de) == 0 && std::ferror(out_en) == 0;
  if (std::fclose(out_de) != 0 || std::fclose(out_en) != 0 || !ok) {
    std::cerr << "generate_corpus: writing " << prefix << ".de / .en failed\n";
    return 1;
  }
  return 0;
}
