#include "decoding/output_languages.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <string>

namespace torchmt {

namespace {

void check_columns(const std::vector<int64_t>& columns, int64_t vocab, const char* what) {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] < 0 || columns[i] >= vocab || (i > 0 && columns[i] <= columns[i - 1]))
      throw std::invalid_argument(std::string("the model's ") + what + " are not sorted ids of its " +
                                  std::to_string(vocab) + "-piece output");
}

}  // namespace

std::shared_ptr<const OutputLanguages> OutputLanguages::of(const ModelLanguages& languages, int64_t vocab) {
  if (!languages.both_directions || languages.target_columns.empty() || languages.source_columns.empty()) return nullptr;
  check_columns(languages.target_columns, vocab, "target_columns");
  check_columns(languages.source_columns, vocab, "source_columns");
  auto out = std::make_shared<OutputLanguages>();
  out->target_ = languages.target_columns;
  out->source_ = languages.source_columns;
  out->side_.assign(static_cast<size_t>(vocab), 0);
  for (int64_t id : out->source_) out->side_[static_cast<size_t>(id)] += 1;
  for (int64_t id : out->target_) out->side_[static_cast<size_t>(id)] -= 1;
  return out;
}

std::shared_ptr<const OutputLanguages> OutputLanguages::only(std::vector<int64_t> columns) {
  auto out = std::make_shared<OutputLanguages>();
  out->target_ = std::move(columns);
  return out;
}

int OutputLanguages::way(const std::vector<int64_t>& source_ids) const {
  if (side_.empty()) return 1;
  int64_t evidence = 0;  // > 0: the source language
  for (int64_t id : source_ids)
    if (id >= 0 && id < static_cast<int64_t>(side_.size())) evidence += side_[static_cast<size_t>(id)];
  return evidence > 0 ? 1 : evidence < 0 ? -1 : 0;
}

const std::vector<int64_t>* OutputLanguages::columns_for(const std::vector<int64_t>& source_ids) const {
  const int w = way(source_ids);
  return w > 0 ? &target_ : w < 0 ? &source_ : nullptr;
}

std::vector<int64_t> within_language(const std::vector<int64_t>& candidates, const std::vector<int64_t>& language,
                                     std::vector<int64_t> extra) {
  std::vector<int64_t> kept;
  if (candidates.empty()) {
    kept = language;
  } else {
    std::set_intersection(candidates.begin(), candidates.end(), language.begin(), language.end(),
                          std::back_inserter(kept));
  }
  std::sort(extra.begin(), extra.end());
  std::vector<int64_t> out;
  std::set_union(kept.begin(), kept.end(), extra.begin(), extra.end(), std::back_inserter(out));
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace torchmt
