// Fuzz target: the checkpoint loader (io/checkpoint.h): the seal check, then for an intact
// archive LibTorch's zip reader and unpickler, the metadata, the tokenizers and the weights.
// The corpus starts from real checkpoints, sealed and unsealed (an unsealed archive is read
// with a warning, so mutations of one reach past the seal).
#include "fuzz_support.h"
#include "torchmt/io/checkpoint.h"
#include "torchmt/util/integrity.h"

using namespace torchmt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("checkpoint.pt", fuzz::as_text(data, size));
  try {
    const LoadedCheckpoint loaded = load_checkpoint(path, c10::Device(c10::kCPU));
    FUZZ_CHECK(loaded.model);
    loaded.meta.model.validate();
  } catch (const std::runtime_error& e) {
    fuzz::check_error_message(e);
    FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);  // names the file
  }
  return 0;
}
