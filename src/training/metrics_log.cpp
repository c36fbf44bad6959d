#include "training/metrics_log.h"
#include "util/atomic_file.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace torchmt {
namespace {

constexpr const char* kHeader = "step,epoch,train_loss,valid_loss,valid_ppl,valid_bleu,tokens_per_sec,wall_seconds,lr,ema_bleu,avg_bleu,corpus_pairs";

std::string fmt(double v, int precision = 4) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", precision, v);
  return buf;
}

// One polyline panel: x = step, y = each series; returns SVG elements.
std::string panel(const std::vector<ValidationRecord>& r, double x0, double y0, double w, double h,
                  const std::string& title, const std::vector<std::pair<std::string, std::vector<double>>>& series,
                  const std::vector<std::string>& colors) {
  double max_step = 1, lo = 1e300, hi = -1e300;
  for (const auto& rec : r) max_step = std::max(max_step, static_cast<double>(rec.step));
  for (const auto& s : series)
    for (double v : s.second)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (lo > hi) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto px = [&](double step) { return x0 + 50 + (w - 60) * step / max_step; };
  auto py = [&](double v) { return y0 + 30 + (h - 60) * (1 - (v - lo) / (hi - lo)); };
  std::ostringstream o;
  o << "<text x='" << x0 + w / 2 << "' y='" << y0 + 18 << "' text-anchor='middle' font-size='14'>" << title
    << "</text>\n";
  o << "<rect x='" << x0 + 50 << "' y='" << y0 + 30 << "' width='" << w - 60 << "' height='" << h - 60
    << "' fill='none' stroke='#999'/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4;
    o << "<text x='" << x0 + 45 << "' y='" << py(v) + 4 << "' text-anchor='end' font-size='10'>" << fmt(v, 2)
      << "</text>\n";
    const double s = max_step * i / 4;
    o << "<text x='" << px(s) << "' y='" << y0 + h - 15 << "' text-anchor='middle' font-size='10'>"
      << static_cast<int64_t>(s) << "</text>\n";
  }
  o << "<text x='" << x0 + w / 2 << "' y='" << y0 + h - 2 << "' text-anchor='middle' font-size='11'>step</text>\n";
  for (size_t si = 0; si < series.size(); ++si) {
    o << "<polyline fill='none' stroke-width='2' stroke='" << colors[si] << "' points='";
    for (size_t i = 0; i < r.size(); ++i)
      if (std::isfinite(series[si].second[i])) o << px(static_cast<double>(r[i].step)) << "," << py(series[si].second[i]) << " ";
    o << "'/>\n";
    o << "<text x='" << x0 + 60 + 110 * si << "' y='" << y0 + 45 << "' font-size='11' fill='" << colors[si] << "'>"
      << series[si].first << "</text>\n";
  }
  return o.str();
}

std::string lr_text(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3e", lr);
  return buf;
}

std::string optional_bleu(double bleu) { return std::isfinite(bleu) ? fmt(bleu, 2) : std::string(); }

}  // namespace

std::string render_curves_svg(const std::vector<ValidationRecord>& r) {
  std::vector<double> train, valid, bleu, ema, avg;
  bool any_ema = false, any_avg = false;
  for (const auto& rec : r) {
    train.push_back(rec.train_loss);
    valid.push_back(rec.valid_loss);
    bleu.push_back(rec.valid_bleu);
    ema.push_back(rec.ema_bleu);
    avg.push_back(rec.avg_bleu);
    any_ema = any_ema || std::isfinite(rec.ema_bleu);
    any_avg = any_avg || std::isfinite(rec.avg_bleu);
  }
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='900' height='340' font-family='sans-serif'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  o << panel(r, 0, 0, 450, 340, "loss per target token", {{"train (smoothed)", train}, {"valid (NLL)", valid}},
             {"#1f77b4", "#d62728"});
  std::vector<std::pair<std::string, std::vector<double>>> bleu_series{{"BLEU", bleu}};
  std::vector<std::string> colors{"#2ca02c"};
  if (any_ema) bleu_series.emplace_back("moving average", ema), colors.push_back("#9467bd");
  if (any_avg) bleu_series.emplace_back("best averaged", avg), colors.push_back("#ff7f0e");
  o << panel(r, 450, 0, 450, 340, "validation BLEU (greedy)", bleu_series, colors);
  o << "</svg>\n";
  return o.str();
}

MetricsLog::MetricsLog(const std::string& run_dir, int64_t resume_step)
    : csv_path_(run_dir + "/metrics.csv"), svg_path_(run_dir + "/curves.svg") {
  std::ifstream in(csv_path_);
  std::string line;
  if (!std::getline(in, line)) return;
  while (std::getline(in, line)) {
    // Fields by position; rows written before lr and ema_bleu existed have 8, an empty field
    // keeps the default.
    std::vector<std::string> f;
    std::istringstream ls(line);
    for (std::string field; std::getline(ls, field, ',');) f.push_back(field);
    if (f.size() < 8) continue;
    ValidationRecord rec;
    try {
      rec.step = std::stoll(f[0]);
      rec.epoch = std::stoll(f[1]);
      double* numbers[] = {&rec.train_loss, &rec.valid_loss, &rec.valid_ppl, &rec.valid_bleu,
                           &rec.tokens_per_sec, &rec.wall_seconds, &rec.lr, &rec.ema_bleu, &rec.avg_bleu};
      for (size_t i = 2; i < f.size() && i < 11; ++i)
        if (!f[i].empty()) *numbers[i - 2] = std::stod(f[i]);
    } catch (const std::exception&) {
      continue;  // a damaged row: the history loses it, the run goes on
    }
    if (f.size() > 11) rec.corpus_pairs = f[11];
    if (rec.step <= resume_step) records_.push_back(rec);
  }
}

void MetricsLog::add(const ValidationRecord& record) {
  records_.push_back(record);
  std::ostringstream csv;
  csv << kHeader << "\n";
  for (const auto& r : records_) {
    csv << r.step << "," << r.epoch << "," << fmt(r.train_loss) << "," << fmt(r.valid_loss) << "," << fmt(r.valid_ppl)
        << "," << fmt(r.valid_bleu, 2) << "," << fmt(r.tokens_per_sec, 0) << "," << fmt(r.wall_seconds, 1) << "," << lr_text(r.lr) << ","
        << optional_bleu(r.ema_bleu) << "," << optional_bleu(r.avg_bleu) << "," << r.corpus_pairs << "\n";
  }
  atomic_write(csv_path_, csv.str());
  atomic_write(svg_path_, render_curves_svg(records_));
}

}  // namespace torchmt
