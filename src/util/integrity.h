#pragma once
// Integrity of the files torchmt writes and reads back. Checkpoints and exports are zip
// archives (torch.save / TorchScript); torchmt seals each one by putting a CRC-32C of every
// byte before it into the archive's comment, a place every zip reader (Python's torch.load
// and torch.jit.load included) skips, and verifies the seal before using the file. A flipped
// bit, a zeroed block, a truncation or appended bytes anywhere in the file is a one-line
// error naming it, never a silently different model.
#include <cstdint>
#include <stdexcept>
#include <functional>
#include <string>
#include <string_view>

namespace torchmt {

// A file torchmt wrote is damaged (checksum mismatch, truncated, bytes appended, unreadable):
// what `train --resume` falls back from, unlike other errors (a wrong model shape, say).
class DamagedFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CRC-32C (Castagnoli), SSE4.2's crc32 instruction where the CPU has it (fast), a table
// otherwise. `crc` continues an earlier call's result.
uint32_t crc32c(std::string_view bytes, uint32_t crc = 0);

// `archive` (a complete zip file without a comment) with its seal appended.
// Throws std::invalid_argument when `archive` does not end with a comment-less zip directory.
std::string seal_zip(std::string archive);

enum class Seal { kVerified, kAbsent };
// Checks the seal of a zip file read whole. kAbsent: an intact zip ending without a comment
// (written before torchmt sealed its files). Throws DamagedFileError
// "WHAT PATH is damaged: REASON" when the checksum differs, bytes follow the archive, or its
// end is missing (truncation); std::runtime_error "WHAT PATH is not a torchmt WHAT" when the
// file is no zip archive at all.
// `checked`, if given, receives the archive's bytes in order, chunk by chunk, as the checksum
// has read them (a caller holding the file mapped releases their pages: io/model_file.cpp).
Seal verify_zip_seal(std::string_view archive, const std::string& what, const std::string& path,
                     const std::function<void(std::string_view)>& checked = {});
// verify_zip_seal, refusing an unsealed (older) file too: LibTorch's zip reader and unpickler are
// not made for damaged input (the checkpoint fuzzer made them read past a buffer and allocate
// gigabytes), so only bytes that verify reach them. `torchmt seal` adds the seal to an old file.
void check_zip_seal(std::string_view archive, const std::string& what, const std::string& path,
                    const std::function<void(std::string_view)>& checked = {});

// Text files torchmt writes and reads back (a run's config.yaml) end with the line
// "# torchmt-crc32c:XXXXXXXX" (a YAML comment), the CRC-32C of every byte before it.
std::string seal_text(std::string text);
// `text` without its seal line. Throws DamagedFileError "WHAT PATH is damaged: ..." when the seal
// line is there and does not match (a file edited by hand: deleting the line accepts it as it
// is); kAbsent in `*seal` when there is none.
std::string verify_text_seal(std::string_view text, const std::string& what, const std::string& path,
                             Seal* seal = nullptr);

}  // namespace torchmt
