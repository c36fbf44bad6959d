#include "torchmt/evaluation/corpus_filter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "evaluation/dual_cross_entropy.h"
#include "torchmt/data/language_identifier.h"
#include "torchmt/util/strings.h"
#include "util/atomic_file.h"
#include "util/heap.h"
#include "util/utf8.h"

namespace torchmt {

namespace {

// Why a pair cannot be scored, "" when it can.
std::string unscorable(const std::string& src, const std::string& tgt) {
  if (!is_valid_utf8(src) || !is_valid_utf8(tgt)) return "invalid UTF-8";
  if (Translator::is_blank(src) || Translator::is_blank(tgt)) return "empty";
  return "";
}

// Why a pair is in the wrong languages, "" when it is not (or the model cannot tell).
std::string wrong_language(const ModelLanguages& languages, const std::string& src, const std::string& tgt) {
  const auto reads_as = [&](const std::string& text, const std::string& code) {
    const auto guesses = languages.identifier.detect(text);
    return !guesses.empty() && guesses.front().confidence > 0 && guesses.front().language == code;
  };
  if (reads_as(tgt, languages.source)) return "target in " + language_name(languages.source);
  if (reads_as(src, languages.target)) return "source in " + language_name(languages.target);
  return "";
}

// Tabs and newlines of a text cell become spaces: the TSV keeps its columns.
std::string cell(std::string text) {
  for (char& c : text)
    if (c == '\t' || c == '\r') c = ' ';
  return text;
}

// score, forward and backward cross-entropy, tab-separated.
void append_scores(std::string& text, const DualScore& d) {
  append_number(text, d.score);
  text += '\t';
  append_number(text, d.forward);
  text += '\t';
  append_number(text, d.backward);
}

struct PairVerdict {
  DualScore score;
  double length = 0.0;    // log_length_ratio, when scored
  std::string reason;     // why it was not scored (its text or its languages); "" when scored
  bool language = false;  // the reason is its languages (its source may still be re-paired)
};

// log(target pieces / source pieces) in the forward model's vocabularies, eos counted on both sides.
double log_length_ratio(const Translator& forward, const std::string& src, const std::string& tgt) {
  return std::log(static_cast<double>(forward.tgt_tokenizer().encode(tgt).size() + 1) /
                  static_cast<double>(forward.src_tokenizer().encode(src).size() + 1));
}

// What keeps a scored pair: a score at most the threshold and a length ratio within the bounds.
struct KeepRule {
  double threshold = 0.0;
  double low = -std::numeric_limits<double>::infinity(), high = std::numeric_limits<double>::infinity();  // logs
  bool length_holds(double log_ratio) const { return log_ratio >= low && log_ratio <= high; }
  bool keeps(const PairVerdict& v) const {
    return v.reason.empty() && v.score.score <= threshold && length_holds(v.length);
  }
};

// The lines of a file, or -1 when it cannot be counted now (its reader reports why).
int64_t lines_in(const std::string& path) {
  try {
    return count_lines(path);
  } catch (const std::exception&) {
    return -1;
  }
}

// The q quantile of scores (not empty): the score floor(q x n) places up, the last at most.
double quantile(std::vector<double> scores, double q) {
  std::sort(scores.begin(), scores.end());
  return scores[std::min(scores.size() - 1, static_cast<size_t>(std::floor(q * static_cast<double>(scores.size()))))];
}

// Pairs scored before a batch (the first 64), for contrasting a batch of one pair.
struct SparePairs {
  std::vector<std::string> src, tgt;
};

// Each pair's contrasting sides (CorpusFilterOptions::contrast): another pair's of the batch, half
// the batch away (neighbouring lines of a slipped corpus may belong together) and with other text on
// both sides; a batch of one pair takes a spare pair's.
ContrastSides contrast_sides(const std::vector<std::string>& src, const std::vector<std::string>& tgt,
                             const SparePairs& spare, const std::string& file) {
  const size_t n = src.size();
  ContrastSides c;
  for (size_t i = 0; i < n; ++i) {
    const auto unrelated = [&](const std::string& s, const std::string& t) { return s != src[i] && t != tgt[i]; };
    bool found = false;
    for (size_t step = 0; step < n && !found; ++step)
      if (const size_t j = (i + n / 2 + step) % n; j != i && unrelated(src[j], tgt[j])) {
        c.sources.push_back(src[j]);
        c.targets.push_back(tgt[j]);
        found = true;
      }
    for (size_t j = 0; j < spare.src.size() && !found; ++j)
      if (unrelated(spare.src[j], spare.tgt[j])) {
        c.sources.push_back(spare.src[j]);
        c.targets.push_back(spare.tgt[j]);
        found = true;
      }
    if (!found)
      throw std::runtime_error("--contrast: " + file + " has no two pairs that can be scored with different text: " +
                               "nothing to contrast a pair with");
  }
  return c;
}

// How many forced decodings score a pair: one each way, and one more each way contrasted.
int64_t scorings_per_pair(const CorpusFilterOptions& o) { return o.contrast ? 4 : 2; }

// The dual scores of a batch, contrasted when the options say so.
std::vector<DualScore> score_batch(Translator& forward, Translator& backward, const TranslationOptions& search,
                                   const CorpusFilterOptions& o, const std::vector<std::string>& src,
                                   const std::vector<std::string>& tgt, const SparePairs& spare,
                                   const std::string& file, const std::function<void(int64_t)>& add) {
  if (!o.contrast) return dual_cross_entropy(forward, backward, src, tgt, search, add);
  const ContrastSides sides = contrast_sides(src, tgt, spare, file);
  return dual_cross_entropy(forward, backward, src, tgt, search, add, &sides);
}

// The reference pairs' scores' quantile, by the same models and search settings.
double reference_threshold(Translator& forward, Translator& backward, const TranslationOptions& search,
                           const CorpusFilterOptions& o, std::vector<std::string> ref_src,
                           std::vector<std::string> ref_tgt, const SparePairs& spare, int64_t& scored) {
  std::vector<std::string> rs, rt;
  for (size_t i = 0; i < ref_src.size(); ++i)
    if (unscorable(ref_src[i], ref_tgt[i]).empty()) {
      rs.push_back(std::move(ref_src[i]));
      rt.push_back(std::move(ref_tgt[i]));
    }
  if (rs.empty()) throw std::runtime_error("--reference-src " + o.reference_src + ": no pair that can be scored");
  std::vector<double> scores;
  for (const auto& d : score_batch(forward, backward, search, o, rs, rt, spare, o.reference_src, {}))
    scores.push_back(d.score);
  scored = static_cast<int64_t>(scores.size());
  return quantile(std::move(scores), o.reference_quantile);
}

// A text's distinct words, lower-cased (ASCII) and without the punctuation around them: what a
// translation and a target must share to be candidates.
std::vector<std::string> distinct_words(const std::string& text) {
  const auto is_mark = [](char c) { return static_cast<unsigned char>(c) < 0x80 && std::ispunct(static_cast<unsigned char>(c)); };
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) {
    size_t b = 0, e = w.size();
    while (b < e && is_mark(w[b])) ++b;
    while (e > b && is_mark(w[e - 1])) --e;
    if (b == e) continue;
    std::string word = w.substr(b, e - b);
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    words.push_back(std::move(word));
  }
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  return words;
}

// A dropped source kept with the target of another dropped line.
struct Repair {
  size_t target_line = 0;
  std::string target;
  DualScore score;
};

// The realignment of the dropped pairs (CorpusFilterOptions::realign), by source line.
std::unordered_map<size_t, Repair> realign_dropped(Translator& forward, Translator& backward,
                                                   const TranslationOptions& search, const CorpusFilterOptions& o,
                                                   const std::vector<PairVerdict>& verdicts, const KeepRule& rule,
                                                   double accept, const SparePairs& spare,
                                                   const std::function<void(const std::string&, int64_t)>& started,
                                                   const std::function<void(int64_t)>& add) {
  // The dropped pairs' line indices and texts; the targets of those dropped for their languages are
  // no one's ("": never a candidate).
  std::vector<size_t> lines;
  std::vector<std::string> src, tgt;
  {
    LineReader s_in(o.src), t_in(o.tgt);
    std::string s, t;
    for (size_t i = 0; i < verdicts.size() && s_in.next(s) && t_in.next(t); ++i) {
      const PairVerdict& v = verdicts[i];
      if (v.language || (v.reason.empty() && !rule.keeps(v))) {
        lines.push_back(i);
        src.push_back(std::move(s));
        tgt.push_back(v.language ? std::string() : std::move(t));
      }
    }
  }
  const size_t n = lines.size();
  if (n < 2) return {};

  // Each dropped source's greedy translation.
  TranslationOptions greedy = search;
  greedy.search.beam_size = 1;
  greedy.search.nbest = 1;
  greedy.search.sampling_topk = 1;
  greedy.search.scores = false;
  if (started) started("translations", static_cast<int64_t>(n));
  std::vector<std::string> hyps;
  hyps.reserve(n);
  for (size_t at = 0; at < n; at += static_cast<size_t>(o.buffer_size)) {
    const size_t end = std::min(n, at + static_cast<size_t>(o.buffer_size));
    for (auto& h : forward.translate_text(std::vector<std::string>(src.begin() + static_cast<std::ptrdiff_t>(at),
                                                                   src.begin() + static_cast<std::ptrdiff_t>(end)),
                                          greedy))
      hyps.push_back(std::move(h));
    add(static_cast<int64_t>(end - at));
  }

  // The targets' words, idf-weighted; words in more than max(1000, n / 20) targets are left out
  // (they tell little and their lists would make the lookup quadratic).
  std::unordered_map<std::string, std::vector<uint32_t>> postings;
  for (size_t j = 0; j < n; ++j)
    for (auto& w : distinct_words(tgt[j])) postings[w].push_back(static_cast<uint32_t>(j));
  const size_t common = std::max<size_t>(1000, n / 20);
  const auto idf = [n](size_t df) { return std::log(static_cast<double>(n + 1) / static_cast<double>(df)); };
  std::vector<double> target_norm(n, 0.0);
  for (const auto& [w, list] : postings)
    if (list.size() <= common)
      for (uint32_t j : list) target_norm[j] += idf(list.size());

  // Each source's candidates: the targets most like its translation (cosine of idf-weighted words).
  std::vector<std::pair<size_t, size_t>> candidates;  // (index into lines of the source, of the target)
  std::vector<double> shared(n, 0.0);
  std::vector<uint32_t> touched;
  for (size_t i = 0; i < n; ++i) {
    double norm = 0.0;
    for (const auto& w : distinct_words(hyps[i])) {
      const auto it = postings.find(w);
      if (it == postings.end() || it->second.size() > common) continue;
      const double weight = idf(it->second.size());
      norm += weight;
      for (uint32_t j : it->second) {
        if (shared[j] == 0.0) touched.push_back(j);
        shared[j] += weight;
      }
    }
    std::vector<std::pair<double, uint32_t>> ranked;
    for (uint32_t j : touched) {
      if (j != i) ranked.emplace_back(shared[j] / std::sqrt(norm * target_norm[j]), j);
      shared[j] = 0.0;
    }
    touched.clear();
    const size_t k = std::min(ranked.size(), static_cast<size_t>(o.realign_candidates));
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(k), ranked.end(),
                      [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (size_t c = 0; c < k; ++c)
      if (rule.length_holds(log_length_ratio(forward, src[i], tgt[ranked[c].second])))
        candidates.emplace_back(i, ranked[c].second);
  }

  // The candidates scored as every pair is; the best first, each source and target once.
  if (started) started("candidate scores", scorings_per_pair(o) * static_cast<int64_t>(candidates.size()));
  std::vector<std::pair<DualScore, size_t>> scored;  // (score, index into candidates)
  for (size_t at = 0; at < candidates.size(); at += static_cast<size_t>(o.buffer_size)) {
    const size_t end = std::min(candidates.size(), at + static_cast<size_t>(o.buffer_size));
    std::vector<std::string> cs, ct;
    for (size_t c = at; c < end; ++c) {
      cs.push_back(src[candidates[c].first]);
      ct.push_back(tgt[candidates[c].second]);
    }
    const auto scores = score_batch(forward, backward, search, o, cs, ct, spare, o.src, add);
    for (size_t c = at; c < end; ++c)
      if (scores[c - at].score <= accept) scored.emplace_back(scores[c - at], c);
    return_free_heap_memory();
  }
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first.score < b.first.score || (a.first.score == b.first.score && a.second < b.second);
  });
  std::vector<bool> source_used(n, false), target_used(n, false);
  std::unordered_map<size_t, Repair> repairs;
  for (const auto& [score, c] : scored) {
    const auto [i, j] = candidates[c];
    if (source_used[i] || target_used[j]) continue;
    source_used[i] = target_used[j] = true;
    repairs[lines[i]] = Repair{lines[j], tgt[j], score};
  }
  return repairs;
}

}  // namespace

const OptionTable<CorpusFilterOptions>& corpus_filter_option_table() {
  using F = CorpusFilterOptions;
  const OptionExtra group{"", "filter", {}};
  static const auto table = OptionTable<F>("filter")
      .add("src", &F::src, "source side of the corpus (plain or .gz)", group)
      .add("tgt", &F::tgt, "target side, line for line", group)
      .add("kept_src", &F::kept_src, "where the kept pairs' sources go", group)
      .add("kept_tgt", &F::kept_tgt, "where the kept pairs' targets go", group)
      .add("dropped", &F::dropped,
           "also write the dropped pairs here (TSV: line, score, forward and backward cross-entropy, reason, source, "
           "target)", group)
      .add("scores", &F::scores, "also write every pair's scores here (TSV: score, forward, backward; one line per pair)",
           group)
      .add("max_score", &F::max_score,
           "keep the pairs scoring at most this (nats per piece, with --contrast a ratio; lower is better); 0: "
           "--keep-fraction decides", group)
      .add("keep_fraction", &F::keep_fraction, "keep this best fraction of the scored pairs (0 < F <= 1)", group)
      .add("reference_src", &F::reference_src,
           "clean held-out pairs (e.g. the validation set), source side: --max-score becomes their scores' "
           "--reference-quantile, so no noise rate need be known", group)
      .add("reference_tgt", &F::reference_tgt, "their target side, line for line", group)
      .add("reference_quantile", &F::reference_quantile,
           "the quantile of the reference pairs' scores that --max-score becomes (0 < Q <= 1)", group)
      .add("contrast", &F::contrast,
           "score each side against the same side given an unrelated other (another pair's): the score becomes "
           "exp(D_f + D_b), lower is better, 1 no likelier than with unrelated sides, and the TSVs' forward and "
           "backward columns D_f and D_b, the differences in cross-entropy; for models trained on a noisy corpus, "
           "which find any fluent side probable (torchmt clean)", group)
      .add("length_quantile", &F::length_quantile,
           "drop the pairs whose length ratio (target pieces per source piece) lies outside the reference pairs' Q "
           "and 1 - Q quantiles (without --reference-src, the corpus's own): a side cut short or run on, which scores "
           "per piece barely see; re-paired pairs too (0 <= Q < 0.5; 0: off)", group)
      .add("buffer_size", &F::buffer_size, "pairs read and scored at a time", group)
      .add("language_check", &F::language_check,
           "drop, unscored, the pairs whose target reads as the source's language or whose source reads as the "
           "target's (copies, swapped sides), when -m knows both languages (--language-check=false: off)", group)
      .add("realign", &F::realign,
           "re-pair dropped sources with dropped targets of other lines (shuffled or slipped lines): each dropped "
           "source's translation finds candidate targets by their words, and a candidate scoring as well as most kept "
           "pairs (--realign-quantile) is kept at the source's line", group)
      .add("realign_candidates", &F::realign_candidates, "the targets scored for each dropped source with --realign",
           group)
      .add("realign_quantile", &F::realign_quantile,
           "a re-paired pair must score within this quantile of the kept pairs' scores (0 < Q <= 1; 1: the threshold)",
           group)
      .add("realigned", &F::realigned,
           "also write the re-paired pairs here (TSV: source line, target line, score, forward, backward)", group);
  return table;
}

void CorpusFilterOptions::validate() const {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(!src.empty() && !tgt.empty(), "give the corpus: --src and --tgt");
  require(!kept_src.empty() && !kept_tgt.empty(), "give where the kept pairs go: --kept-src and --kept-tgt");
  // The ranges first: a negative or NaN value is named as such, not as a missing choice.
  require(max_score >= 0 && std::isfinite(max_score), "--max-score must be a positive number");
  require(keep_fraction >= 0 && keep_fraction <= 1, "--keep-fraction must be in (0, 1]");
  require(reference_quantile > 0 && reference_quantile <= 1, "--reference-quantile must be in (0, 1]");
  require(length_quantile >= 0 && length_quantile < 0.5, "--length-quantile must be in [0, 0.5)");
  require((max_score > 0) + (keep_fraction > 0) + !reference_src.empty() == 1,
          "give one of --max-score S (> 0), --keep-fraction F and --reference-src/--reference-tgt");
  require(reference_src.empty() == reference_tgt.empty(), "--reference-src and --reference-tgt go together");
  require(buffer_size >= 1, "--buffer-size must be at least 1");
  require(first_line >= 1, "the first line's number must be at least 1");
  require(realign_candidates >= 1, "--realign-candidates must be at least 1");
  require(realign_quantile > 0 && realign_quantile <= 1, "--realign-quantile must be in (0, 1]");
  require(realign || realigned.empty(), "--realigned writes what --realign re-paired: give --realign");
  require(src != "-" && tgt != "-", "--src and --tgt must be files (they are read twice)");
  if (auto clash = same_file_twice(
          {{"--src", src}, {"--tgt", tgt}, {"--reference-src", reference_src}, {"--reference-tgt", reference_tgt}},
          {{"--kept-src", kept_src}, {"--kept-tgt", kept_tgt}, {"--dropped", dropped}, {"--scores", scores},
           {"--realigned", realigned}}))
    throw std::invalid_argument(*clash);
}

std::string CorpusFilterReport::truncation_warning(const std::string& src, const std::string& tgt) const {
  if (truncated.count() == 0) return "";
  return std::to_string(truncated.count()) + (truncated.count() == 1 ? " pair" : " pairs") +
         " with a side longer than a model accepts, scored cut: " + truncated.describe() + " of " + src + " and " + tgt;
}

void CorpusFilterReport::add(const CorpusFilterReport& part) {
  pairs += part.pairs;
  kept += part.kept;
  dropped_by_score += part.dropped_by_score;
  dropped_by_length += part.dropped_by_length;
  unscorable += part.unscorable;
  wrong_language += part.wrong_language;
  truncated.merge(part.truncated);
  threshold = std::max(threshold, part.threshold);
  reference_pairs = part.reference_pairs;
  realigned += part.realigned;
  realign_threshold = std::max(realign_threshold, part.realign_threshold);
  if (part.length_high > 0) {
    length_low = length_high > 0 ? std::min(length_low, part.length_low) : part.length_low;
    length_high = std::max(length_high, part.length_high);
  }
}

namespace {
std::string length_bounds_text(const CorpusFilterReport& r) {
  std::ostringstream out;
  out << r.length_low << "-" << r.length_high;
  return out.str();
}
}  // namespace

std::vector<std::string> CorpusFilterReport::rules(const CorpusFilterOptions& o) const {
  std::vector<std::string> lines;
  if (reference_pairs > 0)
    lines.push_back("--max-score " + real_text(threshold) + ", the " + real_text(o.reference_quantile) +
                    " quantile of " + with_thousands(reference_pairs) + " reference pairs' scores");
  if (length_high > 0)
    lines.push_back("--length-quantile " + real_text(o.length_quantile) + ": kept pairs have " +
                    length_bounds_text(*this) + " target pieces per source piece, the " +
                    (o.reference_src.empty() ? "scored pairs' ratios' " : "reference pairs' ratios' ") +
                    real_text(o.length_quantile) + " and " + real_text(1 - o.length_quantile) + " quantiles");
  return lines;
}

std::string CorpusFilterReport::summary() const {
  std::ostringstream out;
  out << "kept " << kept << " of " << pairs << " pairs (dropped " << dropped_by_score << " scoring above " << threshold
      << ", ";
  if (dropped_by_length > 0)
    out << dropped_by_length << " with target pieces per source piece outside " << length_bounds_text(*this) << ", ";
  out << unscorable << " that could not be scored: empty or invalid UTF-8";
  if (wrong_language > 0) out << ", " << wrong_language << " in the wrong language";
  out << ")";
  if (realigned > 0)
    out << " and " << realigned << (realigned == 1 ? " dropped source" : " dropped sources")
        << " with the target of another dropped line";
  return out.str();
}

CorpusFilterReport filter_corpus(Translator& forward, Translator& backward, const TranslationOptions& search,
                                 const CorpusFilterOptions& o,
                                 const std::function<void(const std::string&, int64_t)>& started,
                                 const std::function<void(int64_t)>& progress) {
  o.validate();
  const int64_t src_lines = lines_in(o.src), tgt_lines = lines_in(o.tgt);
  if (src_lines >= 0 && tgt_lines >= 0 && src_lines != tgt_lines)
    throw std::runtime_error(line_count_mismatch(o.src, src_lines, o.tgt, tgt_lines));
  LineReader src_reader(o.src), tgt_reader(o.tgt);  // a missing file: before any scoring
  std::vector<std::string> ref_src, ref_tgt;  // small (a validation set): read now, so a bad one ends nothing long
  if (!o.reference_src.empty()) {
    ref_src = read_lines(o.reference_src);
    ref_tgt = read_lines(o.reference_tgt);
    if (ref_src.size() != ref_tgt.size())
      throw std::runtime_error(line_count_mismatch(o.reference_src, static_cast<int64_t>(ref_src.size()),
                                                   o.reference_tgt, static_cast<int64_t>(ref_tgt.size())));
  }
  auto add = [&progress](int64_t n) {
    if (progress) progress(n);
  };
  const int64_t passes = scorings_per_pair(o);
  if (started) started("pair scores", src_lines >= 0 ? passes * src_lines : -1);
  const ModelLanguages& languages = forward.languages();
  const bool check_languages = o.language_check && !languages.source.empty() && !languages.target.empty() &&
                               languages.source != languages.target && languages.identifier.knows(languages.source) &&
                               languages.identifier.knows(languages.target);

  // Pass 1: every pair's verdict.
  std::vector<PairVerdict> verdicts;
  SparePairs spare;
  bool checked_direction = false;
  std::vector<std::string> src, tgt;
  std::string s, t;
  for (bool ended = false; !ended;) {
    src.clear();
    tgt.clear();
    std::vector<size_t> scorable;
    // The first window holds the direction check's pairs and the contrast's first spare ones.
    const int64_t window = verdicts.empty() ? std::max<int64_t>(o.buffer_size, 64) : o.buffer_size;
    for (int64_t in_window = 0; in_window < window; ++in_window) {
      const bool has_src = src_reader.next(s), has_tgt = tgt_reader.next(t);
      if (has_src != has_tgt)
        throw std::runtime_error("line counts differ: " + (has_src ? o.tgt : o.src) + " ends before " +
                                 (has_src ? o.src : o.tgt) + " (after " + std::to_string(verdicts.size()) + " lines)");
      if (!has_src) {
        ended = true;
        break;
      }
      PairVerdict v;
      v.reason = unscorable(s, t);
      if (v.reason.empty()) {
        scorable.push_back(verdicts.size());
        src.push_back(std::move(s));
        tgt.push_back(std::move(t));
      } else {
        add(passes);
      }
      verdicts.push_back(std::move(v));
    }
    if (src.empty()) continue;
    if (!checked_direction) {
      // Each model must read its side: judged on the first pairs, both ways (before the language
      // check, which models in the wrong roles would fail on every pair).
      const size_t n = std::min<size_t>(64, src.size());
      const std::vector<std::string> s_probe(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n)),
          t_probe(tgt.begin(), tgt.begin() + static_cast<std::ptrdiff_t>(n));
      for (auto [model, name, in, out] : {std::make_tuple(&forward, &o.forward_name, &s_probe, &t_probe),
                                          std::make_tuple(&backward, &o.backward_name, &t_probe, &s_probe)}) {
        const DirectionCheck c = check_direction(*model, *in, *out, search);
        if (!c.agrees()) {
          std::ostringstream message;
          message << *name << " does not translate " << (in == &s_probe ? "--src into --tgt" : "--tgt into --src")
                  << ": on the first " << c.pairs << " pairs it finds the other direction more probable ("
                  << c.against << " against " << c.along
                  << " nats per piece); give the models in the right roles (two models of one direction cannot "
                     "filter)";
          throw std::invalid_argument(message.str());
        }
      }
      checked_direction = true;
    }
    if (check_languages) {
      size_t k = 0;
      for (size_t j = 0; j < scorable.size(); ++j) {
        PairVerdict& v = verdicts[scorable[j]];
        v.reason = wrong_language(languages, src[j], tgt[j]);
        v.language = !v.reason.empty();
        if (v.language) {
          add(passes);
          continue;
        }
        if (k != j) {
          scorable[k] = scorable[j];
          src[k] = std::move(src[j]);
          tgt[k] = std::move(tgt[j]);
        }
        ++k;
      }
      scorable.resize(k);
      src.resize(k);
      tgt.resize(k);
      if (src.empty()) continue;
    }
    const auto scores = score_batch(forward, backward, search, o, src, tgt, spare, o.src, add);
    if (spare.src.size() < 64) {
      const size_t n = std::min(64 - spare.src.size(), src.size());
      spare.src.insert(spare.src.end(), src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n));
      spare.tgt.insert(spare.tgt.end(), tgt.begin(), tgt.begin() + static_cast<std::ptrdiff_t>(n));
    }
    for (size_t k = 0; k < scorable.size(); ++k) {
      verdicts[scorable[k]].score = scores[k];
      verdicts[scorable[k]].length = log_length_ratio(forward, src[k], tgt[k]);
    }
    return_free_heap_memory();
  }

  // The length bounds: the reference pairs' ratios' quantiles, or the corpus's own.
  CorpusFilterReport report;
  KeepRule rule;
  if (o.length_quantile > 0) {
    std::vector<double> ratios;
    if (o.reference_src.empty()) {
      for (const auto& v : verdicts)
        if (v.reason.empty()) ratios.push_back(v.length);
    } else {
      for (size_t i = 0; i < ref_src.size(); ++i)
        if (unscorable(ref_src[i], ref_tgt[i]).empty()) ratios.push_back(log_length_ratio(forward, ref_src[i], ref_tgt[i]));
    }
    if (!ratios.empty()) {
      rule.low = quantile(ratios, o.length_quantile);
      rule.high = quantile(std::move(ratios), 1 - o.length_quantile);
      report.length_low = std::exp(rule.low);
      report.length_high = std::exp(rule.high);
    }
  }

  // The threshold: --max-score, the reference pairs' quantile, or the score at the kept fraction.
  report.pairs = static_cast<int64_t>(verdicts.size());
  report.threshold = o.max_score;
  if (!o.reference_src.empty())
    report.threshold =
        reference_threshold(forward, backward, search, o, std::move(ref_src), std::move(ref_tgt), spare,
                            report.reference_pairs);
  if (o.keep_fraction > 0) {
    std::vector<double> scored;
    for (const auto& v : verdicts)
      if (v.reason.empty()) scored.push_back(v.score.score);
    std::sort(scored.begin(), scored.end());
    const auto keep = static_cast<size_t>(std::floor(o.keep_fraction * static_cast<double>(scored.size())));
    report.threshold = keep == 0 ? -std::numeric_limits<double>::infinity() : scored[keep - 1];
  }
  rule.threshold = report.threshold;

  std::unordered_map<size_t, Repair> repairs;
  if (o.realign) {
    std::vector<double> kept;
    for (const auto& v : verdicts)
      if (rule.keeps(v)) kept.push_back(v.score.score);
    if (!kept.empty()) {
      report.realign_threshold = o.realign_quantile < 1 ? quantile(std::move(kept), o.realign_quantile) : report.threshold;
      repairs = realign_dropped(forward, backward, search, o, verdicts, rule, report.realign_threshold, spare, started,
                                add);
    }
  }

  // Pass 2: the files again, each pair to its place.
  LineReader src_again(o.src), tgt_again(o.tgt);
  AtomicFileWriter kept_src(o.kept_src), kept_tgt(o.kept_tgt);
  std::optional<AtomicFileWriter> dropped, all_scores, realigned;
  if (!o.dropped.empty()) dropped.emplace(o.dropped);
  if (!o.scores.empty()) all_scores.emplace(o.scores);
  if (!o.realigned.empty()) realigned.emplace(o.realigned);
  std::string ks, kt, dr, sc, ra;
  auto flush = [&] {
    kept_src.write(ks);
    kept_tgt.write(kt);
    if (dropped) dropped->write(dr);
    if (all_scores) all_scores->write(sc);
    if (realigned) realigned->write(ra);
    ks.clear(), kt.clear(), dr.clear(), sc.clear(), ra.clear();
  };
  for (size_t i = 0; i < verdicts.size() && src_again.next(s) && tgt_again.next(t); ++i) {
    const PairVerdict& v = verdicts[i];
    if (v.score.truncated) report.truncated.add(static_cast<int64_t>(i) + o.first_line);
    if (all_scores) {
      if (v.reason.empty()) append_scores(sc, v.score);
      else sc += "\t\t";
      sc += '\n';
    }
    if (rule.keeps(v)) {
      ++report.kept;
      (ks += s) += '\n';
      (kt += t) += '\n';
    } else {
      const bool by_score = v.reason.empty() && v.score.score > rule.threshold;  // (the score said first)
      if (v.reason.empty()) ++(by_score ? report.dropped_by_score : report.dropped_by_length);
      else ++(v.language ? report.wrong_language : report.unscorable);
      if (dropped) {
        dr += std::to_string(static_cast<int64_t>(i) + o.first_line) + '\t';
        if (v.reason.empty()) {
          append_scores(dr, v.score);
          dr += by_score ? "\tscore\t" : "\tlength ratio\t";
        } else {
          dr += "\t\t\t" + v.reason + '\t';
        }
        dr += cell(replace_invalid_utf8(s)) + '\t' + cell(replace_invalid_utf8(t)) + '\n';
      }
      if (const auto r = repairs.find(i); r != repairs.end()) {
        ++report.realigned;
        (ks += s) += '\n';
        (kt += r->second.target) += '\n';
        if (realigned) {
          ra += std::to_string(static_cast<int64_t>(i) + o.first_line) + '\t' +
                std::to_string(static_cast<int64_t>(r->second.target_line) + o.first_line) + '\t';
          append_scores(ra, r->second.score);
          ra += '\n';
        }
      }
    }
    if (ks.size() + kt.size() + dr.size() + sc.size() + ra.size() > (1u << 20)) flush();
  }
  flush();
  kept_src.commit();
  kept_tgt.commit();
  if (dropped) dropped->commit();
  if (all_scores) all_scores->commit();
  if (realigned) realigned->commit();
  return report;
}

}  // namespace torchmt
