#include "loading/script_call.h"

#include <stdexcept>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "decoding/output_restriction.h"
#include "torchmt/util/strings.h"

namespace torchmt {
namespace {


class ScriptDecoder : public IncrementalDecoder {
 public:
  ScriptDecoder(torch::jit::Module module, const c10::Device& device, int64_t vocab)
      : module_(std::move(module)), device_(device), vocab_(vocab) {
    for (const char* name : {"start", "step", "select", "reorder"})
      if (!module_.find_method(name))
        throw std::runtime_error(std::string("the TorchScript module has no decoder method ") + name +
                                 " (exported by an older torchmt? export it again)");
  }
  void start(const at::Tensor& src) override {
    state_ = call("start", {src}).toTensorList();
    t_ = 0;
    rows_ = src.size(0);
    restriction_.reset();
  }
  at::Tensor step(const at::Tensor& last_tokens) override {
    // The list is shared with the module (TorchScript lists are references): step extends
    // the self-attention K/V in place.
    auto out = call("step", {last_tokens, t_, state_}).toTensor();
    t_ += 1;
    return restriction_.apply(out);
  }
  void select(const at::Tensor& index) override {
    call("select", {index, state_});
    restriction_.select(index);
    rows_ = index.size(0);
  }
  void reorder_within_sentences(const at::Tensor& index) override {
    call("reorder", {index, state_});
    restriction_.select(index);
  }
  void restrict_output(const std::vector<const std::vector<int64_t>*>& vocabularies) override {
    restriction_.restrict_last(vocabularies, rows_, vocab_, device_);
  }
  at::Device device() const override { return device_; }

 private:
  c10::IValue call(const std::string& name, std::vector<c10::IValue> args) {
    torch::NoGradGuard no_grad;
    // No graph-executor fusion: a fused kernel may round differently from the native ops.
    torch::jit::GraphOptimizerEnabledGuard no_fusion(false);
    return run_script_method(module_, name, std::move(args));
  }
  torch::jit::Module module_;
  c10::Device device_;
  int64_t vocab_;
  c10::List<at::Tensor> state_;
  int64_t t_ = 0;
  int64_t rows_ = 0;
  OutputRestriction restriction_;  // the shortlist: masks the module's log-probabilities
};

}  // namespace

c10::IValue run_script_method(const torch::jit::Module& module, const std::string& name,
                              std::vector<c10::IValue> args) {
  auto method = module.find_method(name);
  if (!method) throw std::runtime_error("the TorchScript module has no method " + name);
  auto& function = torch::jit::toGraphFunction(method->function());
  args.insert(args.begin(), module._ivalue());
  try {
    function.getSchema().checkAndNormalizeInputs(args, {});
    function.get_executor().run(args);
  } catch (const c10::Error& e) {
    throw std::runtime_error("TorchScript " + name + " failed: " + first_line(e.what_without_backtrace()));
  }
  return args.front();
}

std::unique_ptr<IncrementalDecoder> make_script_decoder(torch::jit::Module module, const c10::Device& device,
                                                        int64_t vocab) {
  return std::make_unique<ScriptDecoder>(std::move(module), device, vocab);
}

SearchResult run_archive_search(const torch::jit::Module& module, const at::Tensor& src, const SearchOptions& options) {
  torch::NoGradGuard no_grad;
  torch::jit::GraphOptimizerEnabledGuard no_fusion(false);
  auto result = run_script_method(module, "translate_with_scores",
                                  {src, options.max_len_cap, options.beam_size, options.length_penalty,
                                   options.max_len_a, options.max_len_b})
                    .toTuple();
  auto rows = result->elements()[0].toList();
  auto scores = result->elements()[1].toDoubleVector();
  SearchResult out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    Hypothesis h;
    auto ids = rows.get(r).toIntVector();
    h.tokens.assign(ids.begin(), ids.end());
    h.score = scores[r];
    out[r].push_back(std::move(h));
  }
  return out;
}

}  // namespace torchmt
