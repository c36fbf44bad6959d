// torchmt filter: cleans a parallel corpus by dual conditional cross-entropy
// (evaluation/dual_cross_entropy.h) under a model src->tgt (-m) and a model tgt->src
// (--backward-model). Scores every pair window by window, then writes the kept pairs and, if asked,
// the dropped ones and every pair's scores. A pair that cannot be scored (an empty side, invalid
// UTF-8) is dropped and reported with its reason, never the job.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>

#include "cli_options.h"
#include "input_lines.h"
#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "torchmt/decoding/translation_options.h"
#include "evaluation/dual_cross_entropy.h"
#include "torchmt/loading/model_loader.h"
#include "util/heap.h"
#include "util/progress.h"
#include "util/utf8.h"

namespace torchmt::cli {
namespace {

struct FilterCommandOptions {
  TranslatorConfig translator;
  std::string backward_model, src, tgt, kept_src, kept_tgt, dropped, scores, reference_src, reference_tgt;
  double max_score = 0.0, keep_fraction = 0.0;
  // 0.95: any quantile from 0.90 to 0.98 removed >= 90% of the corrupted pairs and dropped <= 1% of the clean
  // ones in tools/bench/filter_noise.py's corpus; 0.99 removed 89.7%.
  double reference_quantile = 0.95;
  int64_t buffer_size = 4096;
  bool quiet = false;
};

const OptionTable<FilterCommandOptions>& filter_option_table() {
  using O = FilterCommandOptions;
  const OptionExtra group{"", "filter", {}};
  static const auto table = OptionTable<O>("filter")
      .include(translator_option_table(), &O::translator)
      .add("backward_model", &O::backward_model, "the model translating --tgt into --src (-m translates --src into --tgt)", group)
      .add("src", &O::src, "source side of the corpus (plain or .gz)", group)
      .add("tgt", &O::tgt, "target side, line for line", group)
      .add("kept_src", &O::kept_src, "where the kept pairs' sources go", group)
      .add("kept_tgt", &O::kept_tgt, "where the kept pairs' targets go", group)
      .add("dropped", &O::dropped,
           "also write the dropped pairs here (TSV: line, score, forward and backward cross-entropy, reason, source, "
           "target)", group)
      .add("scores", &O::scores, "also write every pair's scores here (TSV: score, forward, backward; one line per pair)",
           group)
      .add("max_score", &O::max_score,
           "keep the pairs scoring at most this (nats per piece; lower is better); 0: --keep-fraction decides", group)
      .add("keep_fraction", &O::keep_fraction, "keep this best fraction of the scored pairs (0 < F <= 1)", group)
      .add("reference_src", &O::reference_src,
           "clean held-out pairs (e.g. the validation set), source side: --max-score becomes their scores' "
           "--reference-quantile, so no noise rate need be known", group)
      .add("reference_tgt", &O::reference_tgt, "their target side, line for line", group)
      .add("reference_quantile", &O::reference_quantile,
           "the quantile of the reference pairs' scores that --max-score becomes (0 < Q <= 1)", group)
      .add("buffer_size", &O::buffer_size, "pairs read and scored at a time", group)
      .add("quiet", &O::quiet, "no progress on stderr", {"q", "filter", {}});
  return table;
}

// Why a pair cannot be scored, "" when it can.
std::string unscorable(const std::string& src, const std::string& tgt) {
  if (!is_valid_utf8(src) || !is_valid_utf8(tgt)) return "invalid UTF-8";
  if (Translator::is_blank(src) || Translator::is_blank(tgt)) return "empty";
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
  std::string reason;  // why it could not be scored; "" when scored
};

int run_filter(int argc, char** argv) {
  int code = kExitOk;
  auto o = parse_options(filter_option_table(),
                         "Clean a parallel corpus by dual conditional cross-entropy (Junczys-Dowmunt 2018): each pair "
                         "is scored by -m (src->tgt) and --backward-model (tgt->src); the pairs probable both ways, "
                         "and about equally so, are kept.",
                         argc, argv, code);
  if (!o) return code;
  for (auto [flag, value] : {std::pair<const char*, const std::string*>{"-m/--model", nullptr},
                             {"--backward-model", &o->backward_model}, {"--src", &o->src}, {"--tgt", &o->tgt},
                             {"--kept-src", &o->kept_src}, {"--kept-tgt", &o->kept_tgt}}) {
    const bool missing = value ? value->empty() : o->translator.models.empty();
    if (missing) return usage_error(argv[0], std::string("missing required option ") + flag);
  }
  if (o->translator.models.size() != 1) return usage_error(argv[0], "filter takes one forward model (-m)");
  if ((o->max_score > 0) + (o->keep_fraction > 0) + !o->reference_src.empty() != 1)
    return usage_error(argv[0], "give one of --max-score S (> 0), --keep-fraction F and --reference-src/--reference-tgt");
  if (o->reference_src.empty() != o->reference_tgt.empty())
    return usage_error(argv[0], "--reference-src and --reference-tgt go together");
  if (!(o->reference_quantile > 0 && o->reference_quantile <= 1))
    return usage_error(argv[0], "--reference-quantile must be in (0, 1]");
  if (o->max_score < 0 || !std::isfinite(o->max_score)) return usage_error(argv[0], "--max-score must be positive");
  if (o->keep_fraction < 0 || o->keep_fraction > 1) return usage_error(argv[0], "--keep-fraction must be in (0, 1]");
  if (o->buffer_size < 1) return usage_error(argv[0], "--buffer-size must be at least 1");
  if (o->src == "-" || o->tgt == "-") return usage_error(argv[0], "--src and --tgt must be files (they are read twice)");
  const int64_t src_lines = count_lines(o->src), tgt_lines = count_lines(o->tgt);
  if (src_lines >= 0 && tgt_lines >= 0 && src_lines != tgt_lines) {
    std::cerr << argv[0] << ": " << line_count_mismatch(o->src, src_lines, o->tgt, tgt_lines) << "\n";
    return kExitFailure;
  }
  LineReader src_reader(o->src), tgt_reader(o->tgt);  // a missing file: before the load
  std::vector<std::string> ref_src, ref_tgt;  // small (a validation set): read now, so a bad one ends nothing long
  if (!o->reference_src.empty()) {
    ref_src = read_lines(o->reference_src);
    ref_tgt = read_lines(o->reference_tgt);
    if (ref_src.size() != ref_tgt.size()) {
      std::cerr << argv[0] << ": "
                << line_count_mismatch(o->reference_src, static_cast<int64_t>(ref_src.size()), o->reference_tgt,
                                       static_cast<int64_t>(ref_tgt.size()))
                << "\n";
      return kExitFailure;
    }
  }
  use_heap_policy(o->translator.translation);
  std::unique_ptr<Translator> forward, backward;
  TranslatorConfig backward_config = o->translator;
  backward_config.models = {o->backward_model};
  if (!check_usage(
          [&] {
            forward = std::make_unique<Translator>(load_cli_translator(o->translator));
            backward = std::make_unique<Translator>(load_cli_translator(backward_config));
          },
          argv[0]))
    return kExitUsage;
  const TranslationOptions& options = o->translator.translation;

  // Pass 1: every pair's verdict (scores only: memory is 40 bytes a pair, not the corpus).
  Progress progress("filter", "pair scores", src_lines >= 0 ? 2 * src_lines : -1,
                    o->quiet ? ProgressStyle::kQuiet : ProgressStyle::kAuto);
  std::vector<PairVerdict> verdicts;
  bool checked_direction = false;
  std::vector<std::string> src, tgt;
  std::string s, t;
  while (true) {
    src.clear();
    tgt.clear();
    std::vector<size_t> scorable;
    bool ended = false;
    for (int64_t in_window = 0; in_window < o->buffer_size; ++in_window) {
      const bool has_src = src_reader.next(s), has_tgt = tgt_reader.next(t);
      if (has_src != has_tgt) {
        std::cerr << argv[0] << ": line counts differ: " << (has_src ? o->tgt : o->src) << " ends before "
                  << (has_src ? o->src : o->tgt) << " (after " << verdicts.size() << " lines)\n";
        return kExitFailure;  // nothing is written: the outputs come in pass 2
      }
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
        progress.add(2);
      }
      verdicts.push_back(std::move(v));
    }
    if (!src.empty()) {
      if (!checked_direction) {
        // Each model must read its side: judged on the first pairs, both ways.
        const size_t n = std::min<size_t>(64, src.size());
        const std::vector<std::string> s_probe(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n)),
            t_probe(tgt.begin(), tgt.begin() + static_cast<std::ptrdiff_t>(n));
        for (auto [model, path, flag, in, out] :
             {std::make_tuple(forward.get(), o->translator.models.front(), "-m", &s_probe, &t_probe),
              std::make_tuple(backward.get(), o->backward_model, "--backward-model", &t_probe, &s_probe)}) {
          const DirectionCheck c = check_direction(*model, *in, *out, options);
          if (!c.agrees()) {
            std::cerr << argv[0] << ": " << flag << " " << path << " does not translate "
                      << (in == &s_probe ? "--src into --tgt" : "--tgt into --src") << ": on the first " << c.pairs
                      << " pairs it finds the other direction more probable (" << c.against << " against " << c.along
                      << " nats per piece); give the models in the right roles (two models of one direction cannot "
                         "filter)\n";
            return kExitUsage;
          }
        }
        checked_direction = true;
      }
      const auto scores = dual_cross_entropy(*forward, *backward, src, tgt, options,
                                             [&progress](int64_t n) { progress.add(n); });
      for (size_t k = 0; k < scorable.size(); ++k) verdicts[scorable[k]].score = scores[k];
      return_free_heap_memory();
    }
    if (ended) break;
  }
  progress.finish();

  // The threshold: --max-score, or the score at the kept fraction of the scored pairs.
  std::vector<double> scored;
  for (const auto& v : verdicts)
    if (v.reason.empty()) scored.push_back(v.score.score);
  double threshold = o->max_score;
  if (!o->reference_src.empty()) {
    // The reference pairs' own scores, by the same models and search settings.
    std::vector<std::string> rs, rt;
    for (size_t i = 0; i < ref_src.size(); ++i)
      if (unscorable(ref_src[i], ref_tgt[i]).empty()) {
        rs.push_back(std::move(ref_src[i]));
        rt.push_back(std::move(ref_tgt[i]));
      }
    if (rs.empty()) {
      std::cerr << argv[0] << ": --reference-src " << o->reference_src << ": no pair that can be scored\n";
      return kExitFailure;
    }
    std::vector<double> ref_scores;
    for (const auto& d : dual_cross_entropy(*forward, *backward, rs, rt, options, {})) ref_scores.push_back(d.score);
    std::sort(ref_scores.begin(), ref_scores.end());
    const auto at = std::min(ref_scores.size() - 1,
                             static_cast<size_t>(std::floor(o->reference_quantile * static_cast<double>(ref_scores.size()))));
    threshold = ref_scores[at];
    std::cerr << "filter: --max-score " << threshold << ", the " << o->reference_quantile << " quantile of "
                << ref_scores.size() << " reference pairs' scores\n";
  }
  if (o->keep_fraction > 0) {
    std::sort(scored.begin(), scored.end());
    const auto keep = static_cast<size_t>(std::floor(o->keep_fraction * static_cast<double>(scored.size())));
    threshold = keep == 0 ? -std::numeric_limits<double>::infinity() : scored[keep - 1];
  }

  // Pass 2: the files again, each pair to its place.
  LineReader src_again(o->src), tgt_again(o->tgt);
  OutputText kept_src(o->kept_src), kept_tgt(o->kept_tgt);
  std::unique_ptr<OutputText> dropped, all_scores;
  if (!o->dropped.empty()) dropped = std::make_unique<OutputText>(o->dropped);
  if (!o->scores.empty()) all_scores = std::make_unique<OutputText>(o->scores);
  int64_t kept = 0, by_score = 0, unscored = 0, truncated = 0;
  std::string ks, kt, dr, sc;
  for (size_t i = 0; i < verdicts.size() && src_again.next(s) && tgt_again.next(t); ++i) {
    const PairVerdict& v = verdicts[i];
    truncated += v.score.truncated ? 1 : 0;
    const bool keep = v.reason.empty() && v.score.score <= threshold;
    if (all_scores) {
      if (v.reason.empty()) {
        append_scores(sc, v.score);
      } else {
        sc += "\t\t";
      }
      sc += '\n';
    }
    if (keep) {
      ++kept;
      (ks += s) += '\n';
      (kt += t) += '\n';
    } else {
      v.reason.empty() ? ++by_score : ++unscored;
      if (dropped) {
        dr += std::to_string(i + 1) + '\t';
        if (v.reason.empty()) {
          append_scores(dr, v.score);
          dr += "\tscore\t";
        } else {
          dr += "\t\t\t" + v.reason + '\t';
        }
        dr += cell(replace_invalid_utf8(s)) + '\t' + cell(replace_invalid_utf8(t)) + '\n';
      }
    }
    if (ks.size() + kt.size() + dr.size() + sc.size() > (1u << 20)) {
      kept_src.write(ks);
      kept_tgt.write(kt);
      if (dropped) dropped->write(dr);
      if (all_scores) all_scores->write(sc);
      ks.clear(), kt.clear(), dr.clear(), sc.clear();
    }
  }
  kept_src.write(ks);
  kept_tgt.write(kt);
  kept_src.commit();
  kept_tgt.commit();
  if (dropped) {
    dropped->write(dr);
    dropped->commit();
  }
  if (all_scores) {
    all_scores->write(sc);
    all_scores->commit();
  }
  if (truncated > 0)
    std::cerr << argv[0] << ": warning: " << truncated
              << " pairs had a side longer than a model accepts and were scored cut\n";
  std::cerr << "filter: kept " << kept << " of " << verdicts.size() << " pairs (dropped " << by_score
            << " scoring above " << threshold << ", " << unscored << " that could not be scored: empty or invalid UTF-8)\n";
  return kExitOk;
}

const CommandRegistration filter_registration(
    {"filter", "clean a parallel corpus by dual conditional cross-entropy", run_filter, 36});

}  // namespace
}  // namespace torchmt::cli
