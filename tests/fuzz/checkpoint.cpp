// Fuzz target: the checkpoint loader (io/checkpoint.h) as every command calls it. Only a file
// whose seal verifies reaches LibTorch's zip reader; everything else must be a one-line error
// naming the file. The corpus starts from real checkpoints, sealed and unsealed; libFuzzer's
// comparison tracing can copy a computed checksum into the input, so forged seals happen too.
#include "fuzz_support.h"
#include "io/checkpoint.h"

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
