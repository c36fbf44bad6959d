#include "util/integrity.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "torchmt/util/strings.h"

namespace torchmt {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // CRC-32C, reflected
constexpr char kSealPrefix[] = "torchmt-crc32c:";
constexpr size_t kSealLength = sizeof(kSealPrefix) - 1 + 8;  // prefix + 8 hex digits
constexpr size_t kEndRecord = 22;                             // zip end-of-central-directory, no comment
constexpr uint32_t kEndSignature = 0x06054b50;

uint32_t crc32c_table(const unsigned char* p, size_t n, uint32_t crc) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

// crc(A || B) from crc(A), crc(B) and |B| (zlib's crc32_combine: multiplying by x^(8|B|) in
// GF(2) with 32x32 bit matrices), for the CRC-32C convention of crc32c().
uint32_t gf2_times(const uint32_t* matrix, uint32_t vector) {
  uint32_t sum = 0;
  for (; vector; vector >>= 1, ++matrix)
    if (vector & 1) sum ^= *matrix;
  return sum;
}
void gf2_square(uint32_t* square, const uint32_t* matrix) {
  for (int n = 0; n < 32; ++n) square[n] = gf2_times(matrix, matrix[n]);
}
uint32_t crc32c_combine(uint32_t crc1, uint32_t crc2, size_t len2) {
  if (len2 == 0) return crc1;
  uint32_t even[32], odd[32];
  odd[0] = kPolynomial;  // the operator for one zero bit
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  gf2_square(even, odd);  // two zero bits
  gf2_square(odd, even);  // four
  do {
    gf2_square(even, odd);  // one zero byte, then 2, 4, ... as len2's bits go
    if (len2 & 1) crc1 = gf2_times(even, crc1);
    len2 >>= 1;
    if (len2 == 0) break;
    gf2_square(odd, even);
    if (len2 & 1) crc1 = gf2_times(odd, crc1);
    len2 >>= 1;
  } while (len2 != 0);
  return crc1 ^ crc2;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The crc32 instruction has a 3-cycle latency and a 1-cycle throughput: three independent
// chains over three thirds of the buffer, combined at the end, keep the unit busy where one
// chain waits on its own latency (bench_export's "seal check" line).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42_chain(const unsigned char* p, size_t n, uint32_t state) {
  uint64_t c = state;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

// Public-convention CRC (pre- and post-inverted) of p[0, n) continuing `crc`.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n, uint32_t crc) {
  if (n < 3 * 4096) return ~crc32c_sse42_chain(p, n, ~crc);
  const size_t third = (n / 3) & ~size_t{7};
  const unsigned char *a = p, *b = p + third, *c = p + 2 * third;
  uint64_t sa = static_cast<uint32_t>(~crc), sb = 0xFFFFFFFFu, sc = 0xFFFFFFFFu;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    std::memcpy(&wa, a + i, 8);
    std::memcpy(&wb, b + i, 8);
    std::memcpy(&wc, c + i, 8);
    sa = __builtin_ia32_crc32di(sa, wa);
    sb = __builtin_ia32_crc32di(sb, wb);
    sc = __builtin_ia32_crc32di(sc, wc);
  }
  const size_t rest = n - 3 * third;  // the last third's tail, in one chain
  const uint32_t last = crc32c_sse42_chain(c + third, rest, static_cast<uint32_t>(sc));
  const uint32_t crc_a = ~static_cast<uint32_t>(sa), crc_b = ~static_cast<uint32_t>(sb), crc_c = ~last;
  return crc32c_combine(crc32c_combine(crc_a, crc_b, third), crc_c, third + rest);
}
const bool kHaveSse42 = [] {
  __builtin_cpu_init();  // needed before constructors have run
  return __builtin_cpu_supports("sse4.2") != 0;
}();
#endif

uint32_t read_u32(std::string_view s, size_t at) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24);
}
uint32_t read_u16(std::string_view s, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(s[at])) |
         (static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 8);
}

std::string seal_of(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  return std::string(kSealPrefix) + hex;
}

}  // namespace

uint32_t crc32c(std::string_view bytes, uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (kHaveSse42) return crc32c_sse42(p, bytes.size(), crc);
#endif
  return ~crc32c_table(p, bytes.size(), ~crc);
}

std::string seal_zip(std::string archive) {
  if (archive.size() < kEndRecord || read_u32(archive, archive.size() - kEndRecord) != kEndSignature ||
      read_u16(archive, archive.size() - 2) != 0)
    throw std::invalid_argument("seal_zip: not a zip archive without a comment");
  const std::string seal = seal_of(crc32c(std::string_view(archive).substr(0, archive.size() - 2)));
  archive[archive.size() - 2] = static_cast<char>(seal.size() & 0xFF);
  archive[archive.size() - 1] = static_cast<char>(seal.size() >> 8);
  return archive + seal;
}

Seal verify_zip_seal(std::string_view archive, const std::string& what, const std::string& path,
                     const std::function<void(std::string_view)>& checked) {
  const auto damaged = [&](const std::string& reason) {
    return DamagedFileError(what + " " + path + " is damaged: " + reason);
  };
  const size_t n = archive.size();
  if (n >= kEndRecord && read_u32(archive, n - kEndRecord) == kEndSignature && read_u16(archive, n - 2) == 0)
    return Seal::kAbsent;  // an intact, unsealed archive
  const size_t end = n >= kEndRecord + kSealLength ? n - kEndRecord - kSealLength : std::string_view::npos;
  if (end != std::string_view::npos && read_u32(archive, end) == kEndSignature &&
      read_u16(archive, end + 20) == kSealLength && archive.substr(end + kEndRecord, sizeof(kSealPrefix) - 1) ==
      kSealPrefix) {
    const std::string stored(archive.substr(end + kEndRecord));
    uint32_t crc = 0;
    const std::string_view sealed = archive.substr(0, end + 20);
    constexpr size_t kChunk = size_t{4} << 20;
    for (size_t at = 0; at < sealed.size(); at += kChunk) {
      const std::string_view chunk = sealed.substr(at, kChunk);
      crc = crc32c(chunk, crc);
      if (checked) checked(chunk);
    }
    const std::string computed = seal_of(crc);
    if (stored != computed)
      throw damaged("checksum mismatch (stored " + escape_control(stored.substr(sizeof(kSealPrefix) - 1)) + ", computed " +
                    computed.substr(sizeof(kSealPrefix) - 1) + ")");
    return Seal::kVerified;
  }
  // No end record where one belongs: find the last one to say what happened.
  const size_t floor = n > 65535 + kEndRecord + 4096 ? n - 65535 - kEndRecord - 4096 : 0;
  for (size_t at = n >= kEndRecord ? n - kEndRecord + 1 : 0; at-- > floor;) {
    if (read_u32(archive, at) != kEndSignature) continue;
    const size_t comment = read_u16(archive, at + 20);
    const size_t expected_end = at + kEndRecord + comment;
    if (expected_end < n) throw damaged(std::to_string(n - expected_end) + " unexpected bytes after the end of the archive");
    throw damaged("its end record or seal is altered");
  }
  if (archive.substr(0, 4) != std::string_view("PK\x03\x04", 4))
    throw std::runtime_error(what + " " + path + " is not a torchmt " + what + " (not a zip archive)");
  throw damaged("corrupt or truncated (no end of archive)");
}

void check_zip_seal(std::string_view archive, const std::string& what, const std::string& path,
                    const std::function<void(std::string_view)>& checked) {
  if (verify_zip_seal(archive, what, path, checked) == Seal::kAbsent)
    throw std::runtime_error(what + " " + path + " carries no checksum (written by torchmt 0.2 or earlier): " +
                             "`torchmt seal " + path + "` checks that it loads and adds one");
}

std::string seal_text(std::string text) {
  if (!text.empty() && text.back() != '\n') text += '\n';
  const std::string seal = seal_of(crc32c(text));
  return text + "# " + seal + "\n";
}

std::string verify_text_seal(std::string_view text, const std::string& what, const std::string& path, Seal* seal) {
  const size_t line = sizeof("# ") - 1 + kSealLength + 1;  // "# " + seal + "\n"
  const std::string_view prefix = "# torchmt-crc32c:";
  const size_t start = text.size() >= line ? text.size() - line : std::string_view::npos;
  if (start == std::string_view::npos || (start > 0 && text[start - 1] != '\n') ||
      text.substr(start, prefix.size()) != prefix || text.back() != '\n') {
    if (seal) *seal = Seal::kAbsent;
    return std::string(text);
  }
  const std::string stored(text.substr(start + 2, kSealLength));
  const std::string computed = seal_of(crc32c(text.substr(0, start)));
  if (stored != computed)
    throw DamagedFileError(what + " " + path + " is damaged: checksum mismatch (stored " +
                           escape_control(stored.substr(sizeof(kSealPrefix) - 1)) + ", computed " +
                           computed.substr(sizeof(kSealPrefix) - 1) +
                           "); if you edited it, delete its last line to use it as it is");
  if (seal) *seal = Seal::kVerified;
  return std::string(text.substr(0, start));
}

}  // namespace torchmt
