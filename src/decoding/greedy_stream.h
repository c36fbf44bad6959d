#pragma once
// Greedy search as a stream of steps over one running batch, for in-flight ("continuous")
// batching: sentences join between steps (IncrementalDecoder::join) and leave as soon as
// they end, so a server keeps each step full instead of waiting for a batch's longest
// sentence. greedy_search is one join, then steps until the stream is empty.
#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "torchmt/decoding/search.h"

namespace torchmt {

class GreedyStream {
 public:
  explicit GreedyStream(IncrementalDecoder& decoder) : decoder_(decoder) {}
  // src [n, S] padded with options.pad_id, on the decoder's device; tags[i] names row i in
  // take_finished(). Into an empty stream this starts the decoder, otherwise the decoder
  // must be able to join (can_join()). All rows of a stream share bos, eos and pad ids.
  // `steering`: one per row, or empty (SentenceSteering; a row's stream is then its tag).
  void join(const at::Tensor& src, const std::vector<int64_t>& tags, const SearchOptions& options,
            const Steering& steering = {});
  // One decoder step for every live row; rows that end move to the finished list.
  void step();
  // The live rows `which` names end at the next step (eos forced, as at their length limit).
  void end_early(const std::function<bool(int64_t tag)>& which);
  // (tag, hypothesis) of the rows finished since the last call, in the order they ended.
  std::vector<std::pair<int64_t, Hypothesis>> take_finished();
  int64_t live() const { return static_cast<int64_t>(rows_.size()); }
  // Live row i (rows keep their places while none ends): its tokens so far and their summed
  // log-probability, for a caller that streams them as they come.
  const Hypothesis& running(size_t i) const { return rows_.at(i).hypothesis; }
  bool empty() const { return rows_.empty(); }

 private:
  struct Row {
    int64_t tag;
    int64_t limit;    // steps allowed, eos included
    SearchOptions options;  // its request's: length penalty, scores, sampling
    std::vector<int64_t> prefix;
    int64_t stream = 0;     // sampling's random stream
    int64_t steps = 0;
    int64_t next = 0;  // the token the next step feeds
    Hypothesis hypothesis;
  };
  IncrementalDecoder& decoder_;
  std::vector<Row> rows_;
  std::vector<std::pair<int64_t, Hypothesis>> finished_;
  int64_t eos_id_ = -1;
};

}  // namespace torchmt
