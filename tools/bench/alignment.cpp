// bench_alignment: word alignments, inline-tag placement and paragraphs, measured on a model.
//   --gold FILE        hand alignments, one pair a line: source TAB reference TAB pairs (i-j sure,
//                      i?j possible; whitespace-separated words, 0-based). Prints the alignment
//                      error rate of every decoder layer x head (and the mean of the heads), the
//                      attention read where a target piece is predicted or (shift) where it is
//                      input, the references forced; then tag placement against the gold: 1-3
//                      tags injected in each source at word boundaries, the reference as the
//                      translation, placed by the default alignment; a tag is right when it wraps
//                      exactly the span of the words gold-aligned to the words it wrapped.
//   --src FILE --tags N        N sentences with 1-3 injected tags (attributes with entities)
//                      translated as HTML: well-formed, every tag once, attributes byte-exact,
//                      text equal to the untagged translation, each tag around the span of the
//                      words aligned to its words (the translation's own alignment).
//   --src FILE --paragraphs N  N paragraphs of 2-4 consecutive lines translated with sentence
//                      splitting: equal to the lines translated one by one, joined.
#include <algorithm>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include <cxxopts.hpp>
#include <torch/torch.h>

#include "torchmt/loading/model_loader.h"
#include "data/document.h"
#include "data/text_file.h"
#include "decoding/document_translator.h"
#include "torchmt/decoding/translator.h"
#include "torchmt/decoding/word_aligner.h"
#include "torchmt/util/device.h"
#include "kernels/cpu_isa.h"

using namespace torchmt;

namespace {

struct GoldPair {
  std::string source, reference;
  GoldAlignment gold;
};

std::vector<GoldPair> read_gold(const std::string& path) {
  std::vector<GoldPair> out;
  for (const auto& line : read_lines(path)) {
    const size_t a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos)
      throw std::runtime_error(path + ": a line without source TAB reference TAB pairs");
    out.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), parse_gold_alignment(line.substr(b + 1))});
  }
  return out;
}

// An injected inline element: its tags and the source words [first, last] it wraps.
struct Injected {
  std::string open, close;
  int32_t first = 0, last = 0;
};

// 1-3 elements around word spans of `sentence` (nested or disjoint), as HTML.
std::string inject_tags(const std::string& sentence, std::mt19937& rng, std::vector<Injected>& tags) {
  const auto words = whitespace_words(sentence);
  const auto n = static_cast<int32_t>(words.size());
  tags.clear();
  static const std::pair<const char*, const char*> kinds[] = {
      {"<b data-k=\"%\">", "</b>"},
      {"<i data-k=\"%\">", "</i>"},
      {"<a data-k=\"%\" href=\"/p?x=1&amp;y=2\" title=\"&quot;T&quot; &amp; &Auml;\">", "</a>"},
      {"<span data-k=\"%\" class=\"term\">", "</span>"}};
  const int count = 1 + static_cast<int>(rng() % 3);
  for (int tries = 0; static_cast<int>(tags.size()) < count && tries < 50; ++tries) {
    const int32_t len = 1 + static_cast<int32_t>(rng() % 3);
    if (len > n) continue;
    const int32_t first = static_cast<int32_t>(rng() % static_cast<uint32_t>(n - len + 1)), last = first + len - 1;
    bool laminar = true;
    for (const auto& t : tags) {
      const bool disjoint = last < t.first || first > t.last;
      const bool inside = first >= t.first && last <= t.last, outside = first <= t.first && last >= t.last;
      const bool same = first == t.first && last == t.last;
      laminar = laminar && (disjoint || inside || outside) && !same;
    }
    if (!laminar) continue;
    const auto& kind = kinds[rng() % 4];
    std::string open = kind.first;
    open.replace(open.find('%'), 1, std::to_string(tags.size()));
    tags.push_back({open, kind.second, first, last});
  }
  // Outer elements open first and close last.
  std::string out;
  for (int32_t w = 0; w < n; ++w) {
    if (w) out += ' ';
    std::vector<const Injected*> opening, closing;
    for (const auto& t : tags) {
      if (t.first == w) opening.push_back(&t);
      if (t.last == w) closing.push_back(&t);
    }
    std::sort(opening.begin(), opening.end(), [](auto* x, auto* y) { return x->last > y->last; });
    std::sort(closing.begin(), closing.end(), [](auto* x, auto* y) { return x->first > y->first; });
    for (auto* t : opening) out += t->open;
    for (char c : sentence.substr(words[static_cast<size_t>(w)].begin,
                                  words[static_cast<size_t>(w)].end - words[static_cast<size_t>(w)].begin)) {
      if (c == '&') out += "&amp;";
      else if (c == '<') out += "&lt;";
      else if (c == '>') out += "&gt;";
      else out += c;
    }
    for (auto* t : closing) out += t->close;
  }
  return out;
}

// The elements of an HTML sentence: open tag -> the words [first, last] of its text it wraps
// (last < first: none); false when its tags do not nest.
bool placed_tags(const std::string& html, std::map<std::string, std::pair<int32_t, int32_t>>& spans,
                 std::string& plain) {
  plain.clear();
  spans.clear();
  std::vector<std::pair<std::string, size_t>> stack;  // open tag, position in plain
  std::vector<std::tuple<std::string, size_t, size_t>> elements;
  for (size_t i = 0; i < html.size();) {
    if (html[i] != '<') {
      plain += html[i++];
      continue;
    }
    const size_t gt = html.find('>', i);
    if (gt == std::string::npos) return false;
    const std::string tag = html.substr(i, gt + 1 - i);
    i = gt + 1;
    if (tag == "<br>" || tag.rfind("<img", 0) == 0) continue;
    if (tag[1] == '/') {
      const std::string name = tag.substr(2, tag.size() - 3);
      if (stack.empty() || stack.back().first.compare(1, name.size(), name) != 0) return false;
      elements.emplace_back(stack.back().first, stack.back().second, plain.size());
      stack.pop_back();
    } else {
      stack.emplace_back(tag, plain.size());
    }
  }
  if (!stack.empty()) return false;
  const auto words = whitespace_words(plain);
  for (const auto& [tag, begin, end] : elements) {
    int32_t first = -1, last = -2;
    for (size_t w = 0; w < words.size(); ++w) {
      if (words[w].end <= begin || words[w].begin >= end) continue;
      if (first < 0) first = static_cast<int32_t>(w);
      last = static_cast<int32_t>(w);
    }
    if (!spans.emplace(tag, std::make_pair(first, last)).second) return false;  // a tag twice
  }
  return true;
}

// The span of the target words aligned to source words [first, last] (last < first: none).
std::pair<int32_t, int32_t> hull(const WordAlignment& pairs, int32_t first, int32_t last) {
  int32_t lo = 1 << 30, hi = -1;
  for (const auto& [s, t] : pairs) {
    if (s < first || s > last) continue;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  return hi < 0 ? std::make_pair(-1, -2) : std::make_pair(lo, hi);
}

std::string percent(int64_t k, int64_t n) {
  std::ostringstream o;
  o << k << "/" << n << " (" << std::fixed << std::setprecision(1) << 100.0 * static_cast<double>(k) / static_cast<double>(std::max<int64_t>(1, n)) << "%)";
  return o.str();
}

void gold_report(Translator& translator, const std::string& path, const AlignmentOptions& chosen) {
  const auto pairs = read_gold(path);
  std::vector<std::string> sources;
  std::vector<std::vector<int64_t>> targets;
  for (const auto& p : pairs) {
    sources.push_back(p.source);
    targets.push_back(translator.tgt_tokenizer().encode(p.reference));
  }
  const auto& c = translator.config();
  std::cout << "alignment error rate on " << pairs.size() << " hand-aligned pairs (" << path << "), references forced\n"
            << "layer  head   AER(pred)  AER(shift)\n";
  double best = 2;
  AlignmentOptions best_options;
  for (int64_t layer = 0; layer < c.num_decoder_layers; ++layer) {
    for (int64_t head = -1; head < c.num_heads; ++head) {
      std::cout << std::setw(5) << layer << "  " << std::setw(4) << (head < 0 ? std::string("mean") : std::to_string(head));
      for (bool shift : {false, true}) {
        AlignmentOptions o{layer, head, shift};
        const auto predicted = align_words(translator, sources, targets, o);
        AlignmentScore score;
        for (size_t i = 0; i < pairs.size(); ++i) score.add(predicted[i], pairs[i].gold);
        std::cout << "   " << std::fixed << std::setprecision(3) << std::setw(8) << score.error_rate();
        if (score.error_rate() < best) {
          best = score.error_rate();
          best_options = o;
        }
      }
      std::cout << "\n";
    }
  }
  std::cout << "lowest: layer " << best_options.layer << " head "
            << (best_options.head < 0 ? std::string("mean") : std::to_string(best_options.head))
            << (best_options.shift ? " shift" : "") << " AER " << std::setprecision(3) << best << "\n";
  const auto predicted = align_words(translator, sources, targets, chosen);
  AlignmentScore score;
  for (size_t i = 0; i < pairs.size(); ++i) score.add(predicted[i], pairs[i].gold);
  std::cout << "default (layer " << chosen.layer << ", head " << chosen.head << (chosen.shift ? ", shift" : "")
            << "): AER " << score.error_rate() << ", precision " << score.precision() << ", recall " << score.recall()
            << "\n";

  // Tag placement against the gold alignment.
  std::mt19937 rng(7);
  int64_t tags = 0, right = 0, nested = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::vector<Injected> injected;
    const std::string html = inject_tags(pairs[i].source, rng, injected);
    const Document d(html, DocumentFormat::kHtml, nullptr);
    if (d.sentences().size() != 1) continue;
    const std::string out = d.assemble({{pairs[i].reference, predicted[i]}});
    std::map<std::string, std::pair<int32_t, int32_t>> spans;
    std::string plain;
    const bool ok = placed_tags(out, spans, plain);
    nested += ok ? 1 : 0;
    for (const auto& t : injected) {
      ++tags;
      const auto it = spans.find(t.open);
      const bool hit = ok && it != spans.end() && it->second == hull(pairs[i].gold.possible, t.first, t.last);
      right += hit ? 1 : 0;
    }
  }
  std::cout << "tag placement against the gold alignment: " << percent(right, tags) << " tags exactly on the gold span, "
            << percent(nested, static_cast<int64_t>(pairs.size())) << " sentences well-formed\n";
}

void tags_report(Translator& translator, const std::vector<std::string>& lines, const AlignmentOptions& options) {
  std::mt19937 rng(11);
  std::vector<Document> docs;
  std::vector<std::vector<Injected>> injected(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    docs.emplace_back(inject_tags(lines[i], rng, injected[i]), DocumentFormat::kHtml, nullptr);
  TranslationOptions topts;
  const auto html_out = translate_documents(translator, docs, topts, options, false);
  std::vector<Document> plain_docs;
  for (const auto& l : lines) plain_docs.emplace_back(l, DocumentFormat::kText, nullptr);
  const auto plain_out = translate_documents(translator, plain_docs, topts, options, true);
  int64_t tags = 0, right = 0, once = 0, nested = 0, same_text = 0, attributes = 0, attribute_total = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::map<std::string, std::pair<int32_t, int32_t>> spans;
    std::string plain;
    const bool ok = placed_tags(html_out[i].text, spans, plain);
    nested += ok ? 1 : 0;
    // The text without tags, entities written back to characters, against the plain translation.
    std::string unescaped;
    for (size_t k = 0; k < plain.size();) {
      bool done = false;
      for (const auto& [e, c] : {std::pair<const char*, const char*>{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}}) {
        if (plain.compare(k, std::strlen(e), e) == 0) {
          unescaped += c;
          k += std::strlen(e);
          done = true;
          break;
        }
      }
      if (!done) unescaped += plain[k++];
    }
    same_text += unescaped == plain_out[i].text ? 1 : 0;
    for (const auto& t : injected[i]) {
      ++tags;
      const auto it = spans.find(t.open);
      once += ok && it != spans.end() ? 1 : 0;
      if (t.open.rfind("<a", 0) == 0) {
        ++attribute_total;
        attributes += html_out[i].text.find(t.open) != std::string::npos ? 1 : 0;
      }
      right += ok && it != spans.end() && it->second == hull(plain_out[i].alignment, t.first, t.last) ? 1 : 0;
    }
  }
  std::cout << lines.size() << " sentences with " << tags << " injected tags, translated as HTML:\n"
            << "  well-formed: " << percent(nested, static_cast<int64_t>(lines.size())) << "\n"
            << "  every tag exactly once: " << percent(once, tags) << "\n"
            << "  attributes byte-exact (entities included): " << percent(attributes, attribute_total) << "\n"
            << "  text equal to the untagged translation: " << percent(same_text, static_cast<int64_t>(lines.size())) << "\n"
            << "  tag on the span of its words' aligned words: " << percent(right, tags) << "\n";
}

void paragraphs_report(Translator& translator, const std::vector<std::string>& lines, int64_t count) {
  const SentenceSplitter splitter("de");
  std::vector<Document> docs;
  std::vector<std::string> expected_lines;
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t next = 0;
  for (int64_t p = 0; p < count && next < lines.size(); ++p) {
    const size_t n = std::min<size_t>(2 + static_cast<size_t>(p % 3), lines.size() - next);
    ranges.emplace_back(next, next + n);
    next += n;
  }
  std::vector<std::string> used(lines.begin(), lines.begin() + static_cast<std::ptrdiff_t>(next));
  const auto one_by_one = translator.translate_text(used, TranslationOptions{});
  int64_t equal = 0, split_right = 0, marked = 0, marked_equal = 0;
  for (const auto& [b, e] : ranges) {
    std::string text;
    for (size_t i = b; i < e; ++i) text += (i > b ? " " : "") + lines[i];
    docs.emplace_back(text, DocumentFormat::kText, &splitter);
  }
  const auto out = translate_documents(translator, docs, TranslationOptions{}, {}, false);
  for (size_t p = 0; p < ranges.size(); ++p) {
    const auto [b, e] = ranges[p];
    std::string want;
    for (size_t i = b; i < e; ++i) want += (i > b ? " " : "") + one_by_one[i];
    equal += out[p].text == want ? 1 : 0;
    split_right += docs[p].sentences().size() == e - b ? 1 : 0;
    // Lines that end without . ! ? (or ... closing quotes) cannot be told apart from the next by any rule.
    bool all_marked = true;
    for (size_t i = b; i + 1 < e; ++i) {
      std::string l = lines[i];
      while (!l.empty() && (l.back() == ' ' || l.back() == '"' || l.back() == ')')) l.pop_back();
      all_marked = all_marked && !l.empty() && (l.back() == '.' || l.back() == '!' || l.back() == '?');
    }
    marked += all_marked ? 1 : 0;
    marked_equal += all_marked && out[p].text == want ? 1 : 0;
  }
  std::cout << ranges.size() << " paragraphs of 2-4 consecutive lines (" << next << " lines), split into sentences:\n"
            << "  split where the lines end: " << percent(split_right, static_cast<int64_t>(ranges.size())) << "\n"
            << "  translation equal to the lines one by one, joined: " << percent(equal, static_cast<int64_t>(ranges.size()))
            << "\n  of the paragraphs whose lines end with . ! or ?: " << percent(marked_equal, marked) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  torchmt::kernels::limit_library_isas();  // as the CLI: LibTorch's libraries at torchmt's level
  torchmt::use_shape_free_cuda_attention();
  cxxopts::Options options("bench_alignment", "word alignments, tag placement and paragraphs, measured");
  options.add_options()("m,model", "checkpoint", cxxopts::value<std::string>())(
      "gold", "hand alignments: source TAB reference TAB pairs", cxxopts::value<std::string>()->default_value(""))(
      "src", "source sentences (plain or .gz)", cxxopts::value<std::string>()->default_value(""))(
      "tags", "sentences of --src with injected tags", cxxopts::value<int64_t>()->default_value("0"))(
      "paragraphs", "paragraphs of --src lines", cxxopts::value<int64_t>()->default_value("0"))(
      "layer", "alignment layer for placement", cxxopts::value<int64_t>()->default_value(std::to_string(AlignmentOptions{}.layer)))(
      "head", "alignment head for placement", cxxopts::value<int64_t>()->default_value(std::to_string(AlignmentOptions{}.head)))(
      "shift", "read the attention where the target piece is input", cxxopts::value<bool>()->default_value("false"))(
      "h,help", "help");
  try {
    const auto args = options.parse(argc, argv);
    if (args.count("help") || !args.count("model")) {
      std::cout << options.help() << "\n";
      return args.count("help") ? 0 : 2;
    }
    torch::set_num_threads(2);
    auto translator = load_translator(args["model"].as<std::string>(), torch::kCPU, torch::kFloat);
    const AlignmentOptions chosen{args["layer"].as<int64_t>(), args["head"].as<int64_t>(), args["shift"].as<bool>()};
    std::cout << "model " << args["model"].as<std::string>() << " (" << translator.config().num_decoder_layers
              << " decoder layers, " << translator.config().num_heads << " heads), fp32 on the CPU\n";
    if (!args["gold"].as<std::string>().empty()) gold_report(translator, args["gold"].as<std::string>(), chosen);
    std::vector<std::string> lines;
    if (!args["src"].as<std::string>().empty()) lines = read_lines(args["src"].as<std::string>());
    if (const auto n = args["tags"].as<int64_t>(); n > 0) {
      std::vector<std::string> first(lines.begin(), lines.begin() + std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(lines.size())));
      tags_report(translator, first, chosen);
    }
    if (const auto n = args["paragraphs"].as<int64_t>(); n > 0) paragraphs_report(translator, lines, n);
  } catch (const std::exception& e) {
    std::cerr << "bench_alignment: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
