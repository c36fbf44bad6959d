// Fuzz target: the corpus reader (data/text_file.h, plain and gzip) and the parallel corpus
// loader (data/parallel_corpus.h). The input before its first NUL byte is the source file, the
// rest the target file (no NUL: both sides are the input).
#include <zlib.h>

#include <vector>

#include "fuzz_support.h"
#include "data/parallel_corpus.h"
#include "data/text_file.h"
#include "util/utf8.h"

using namespace torchmt;

namespace {

// What LineReader promises: lines cut at '\n', no empty line after a final '\n', one trailing
// '\r' dropped.
std::vector<std::string> expected_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

bool gzip_magic(std::string_view text) { return text.size() >= 2 && text[0] == '\x1f' && text[1] == '\x8b'; }

std::vector<std::string> read_checked(const std::string& path) {
  std::vector<std::string> lines;
  try {
    lines = read_lines(path);
  } catch (const std::runtime_error& e) {  // a damaged gzip stream: refused, by name
    fuzz::check_error_message(e);
    FUZZ_CHECK(std::string(e.what()).find(path) != std::string::npos);
    return {};
  }
  FUZZ_CHECK(count_lines(path) == static_cast<int64_t>(lines.size()));
  LineReader reader(path);
  std::string line;
  for (const auto& expected : lines) {
    FUZZ_CHECK(reader.next(line) && line == expected);
    FUZZ_CHECK(line.find('\n') == std::string::npos);
  }
  FUZZ_CHECK(!reader.next(line));
  FUZZ_CHECK(reader.line_number() == static_cast<int64_t>(lines.size()));
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = fuzz::sample_tokenizer();
  const std::string_view text = fuzz::as_text(data, size);

  // Plain: exactly the lines in the bytes (unless the bytes are themselves a gzip stream).
  const std::string plain = fuzz::write_scratch("input.txt", text);
  const auto lines = read_checked(plain);
  if (!gzip_magic(text)) FUZZ_CHECK(lines == expected_lines(text));

  // The same bytes gzip-compressed read back as the same lines.
  const std::string gz = fuzz::scratch_dir() + "/input.txt.gz";
  gzFile f = gzopen(gz.c_str(), "wb1");
  FUZZ_CHECK(f != nullptr);
  if (size > 0) FUZZ_CHECK(gzwrite(f, data, static_cast<unsigned>(size)) == static_cast<int>(size));
  FUZZ_CHECK(gzclose(f) == Z_OK);
  FUZZ_CHECK(read_checked(gz) == expected_lines(text));

  // Pairs: counted, never silently dropped; mismatched line counts are one clear error.
  const size_t nul = text.find('\0');
  const std::string_view src_text = nul == std::string_view::npos ? text : text.substr(0, nul);
  const std::string_view tgt_text = nul == std::string_view::npos ? text : text.substr(nul + 1);
  if (gzip_magic(src_text) || gzip_magic(tgt_text)) return 0;
  const auto src_lines = expected_lines(src_text), tgt_lines = expected_lines(tgt_text);
  const std::string src = fuzz::write_scratch("pairs.de", src_text), tgt = fuzz::write_scratch("pairs.en", tgt_text);
  CorpusOptions options;
  options.max_sentence_tokens = 24;
  options.num_threads = 1;
  try {
    const EncodedCorpus corpus = load_parallel_corpus(src, tgt, tok, tok, options);
    FUZZ_CHECK(src_lines.size() == tgt_lines.size());
    const CorpusStats& s = corpus.stats;
    FUZZ_CHECK(s.total == static_cast<int64_t>(src_lines.size()));
    FUZZ_CHECK(s.kept + s.too_long + s.empty + s.invalid_utf8 == s.total);
    FUZZ_CHECK(s.kept == static_cast<int64_t>(corpus.pairs.size()));
    int64_t invalid = 0;
    for (size_t i = 0; i < src_lines.size(); ++i) invalid += !is_valid_utf8(src_lines[i]) || !is_valid_utf8(tgt_lines[i]);
    FUZZ_CHECK(s.invalid_utf8 == invalid);
    int64_t previous = -1;
    for (const auto& p : corpus.pairs) {
      FUZZ_CHECK(p.index > previous && p.index < s.total);  // file order, each line once
      previous = p.index;
      FUZZ_CHECK(!p.src.empty() && !p.tgt.empty());
      FUZZ_CHECK(static_cast<int64_t>(p.src.size()) < options.max_sentence_tokens);
      FUZZ_CHECK(static_cast<int64_t>(p.tgt.size()) < options.max_sentence_tokens);
      for (int32_t id : p.src) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
      for (int32_t id : p.tgt) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
    }
  } catch (const std::runtime_error& e) {
    FUZZ_CHECK(src_lines.size() != tgt_lines.size());
    fuzz::check_error_message(e);
  }
  return 0;
}
