#include "torchmt/export/script_call.h"

#include <stdexcept>

#include <torch/csrc/jit/api/function_impl.h>

namespace torchmt {

c10::IValue run_script_method(const torch::jit::Module& module, const std::string& name,
                              std::vector<c10::IValue> args) {
  auto method = module.find_method(name);
  if (!method) throw std::runtime_error("the TorchScript module has no method " + name);
  auto& function = torch::jit::toGraphFunction(method->function());
  args.insert(args.begin(), module._ivalue());
  function.getSchema().checkAndNormalizeInputs(args, {});
  function.get_executor().run(args);
  return args.front();
}

}  // namespace torchmt
