#pragma once
// Calling a method of a loaded TorchScript module from C++ in a torchmt process, and the
// two ways torchmt decodes with one: its own search over the module's decoder interface
// (start / step / select / reorder), or the module's in-archive `translate_with_scores`.
//
// Why not Method::operator(): GraphFunction::run first asks c10::GetEventSampledHandler,
// whose static mutex sits right after libc10's FLAGS_minloglevel. Debian's libsentencepiece
// (which torchmt links) defines its own absl flag FLAGS_minloglevel (a 32-byte object); the
// dynamic linker binds its constructor to libc10's 4-byte int, the constructor overwrites the
// mutex, and the first TorchScript call deadlocks. run_script_method does what
// Method::operator() does (prepend self, normalise default/keyword arguments, run the graph
// executor) without that logging hook. Python (its own sentencepiece wheel) is unaffected.
//
// The only torchmt header that includes TorchScript headers.
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "torchmt/decoding/incremental_decoder.h"
#include "torchmt/decoding/search.h"

namespace torchmt {

// Throws std::runtime_error with the first line of TorchScript's message on failure.
c10::IValue run_script_method(const torch::jit::Module& module, const std::string& name,
                              std::vector<c10::IValue> args);

// IncrementalDecoder over `module`'s methods (the export's decoder interface, see
// src/export/torchscript_source.h): start(src) -> state, step(last, t, state) -> [N, V]
// log-probabilities, select(index, state), reorder(index, state). `vocab`: V, the output size
// (for a shortlist given before the first step).
std::unique_ptr<IncrementalDecoder> make_script_decoder(torch::jit::Module module, const c10::Device& device,
                                                        int64_t vocab);

// `module`'s translate_with_scores on src [B, S]: one hypothesis (tokens, score) per row.
// Uses beam_size, length_penalty, max_len_a, max_len_b and max_len_cap of `options`.
SearchResult run_archive_search(const torch::jit::Module& module, const at::Tensor& src, const SearchOptions& options);

}  // namespace torchmt
