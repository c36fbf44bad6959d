// Fuzz target: the reader of Python torch.save state dicts (io/pickled_state_dict.h), which
// `torchmt import --format marian` runs on pytorch_model.bin. Every input is either a dictionary
// of tensors or a one-line error naming the file; no global outside its short list is called.
#include "fuzz_support.h"
#include "io/pickled_state_dict.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("pytorch_model.bin", fuzz::as_text(data, size));
  try {
    for (const auto& [name, tensor] : read_pickled_state_dict(path)) FUZZ_CHECK(tensor.defined() && !name.empty());
  } catch (const std::runtime_error& e) {
    fuzz::check_error_message(e);
    FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);  // names the file
  }
  return 0;
}
