// Load a torchmt model (checkpoint or TorchScript export) and translate a batch of
// sentences through the Translator API: the whole of what a C++ program needs.
//   translate_batch MODEL SENTENCE...
#include <iostream>
#include <string>
#include <vector>

#include <torchmt/decoding/translator.h>
#include <torchmt/loading/model_loader.h>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " MODEL SENTENCE...\n";
    return 2;
  }
  try {
    torchmt::Translator translator = torchmt::load_translator(argv[1], c10::Device(c10::kCPU), c10::ScalarType::Float);
    torchmt::TranslationOptions options;
    options.search.beam_size = 4;
    std::vector<std::string> batch(argv + 2, argv + argc);
    for (const auto& line : translator.translate_text(batch, options)) std::cout << line << "\n";
  } catch (const std::exception& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
