#pragma once
// Calling a method of a loaded TorchScript module from C++ in a torchmt process.
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
#include <string>
#include <vector>

#include <torch/script.h>

namespace torchmt {

c10::IValue run_script_method(const torch::jit::Module& module, const std::string& name,
                              std::vector<c10::IValue> args);

}  // namespace torchmt
