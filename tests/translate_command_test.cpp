// `torchmt translate` and `torchmt evaluate -m` as a user runs them.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "data_test_support.h"
#include "torchmt/data/sentence_splitter.h"
#include "io/checkpoint.h"

namespace torchmt {
namespace {

using test::tiny_checkpoint;

std::string tm() { return test::torchmt_binary(); }

size_t count_lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

TEST(TranslateCommand, StdinToStdoutOneLinePerInputLine) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\n\nWie geht es dir?\n");
  // stdout only: progress and timing must stay on stderr.
  auto r = test::run_command("(" + tm() + " translate -m " + tiny_checkpoint() + " < " + dir.file("in.de") + " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output), 3u) << r.output;
  EXPECT_EQ(r.output.substr(r.output.find('\n') + 1, 1), "\n");  // the empty line stays empty
  // Files in and out, beam search and n-best.
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " -i " + dir.file("in.de") + " -o " +
                        dir.file("out.en") + " --beam 3 --nbest 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto out = test::read_text(dir.file("out.en"));
  EXPECT_EQ(count_lines(out), 5u) << out;  // two per sentence, one for the empty line
  EXPECT_NE(out.find("0 ||| "), std::string::npos);
  EXPECT_NE(r.output.find("translated 3 lines"), std::string::npos) << r.output;  // timing on stderr
}

// Paragraphs, alignments and HTML documents, as a user runs them; their flags' misuse is a
// one-line usage error.
TEST(TranslateCommand, ParagraphsAlignmentsAndHtml) {
  test::TempDir dir;
  const auto lines = test::sample_lines(6);
  std::string one_per_line, paragraphs;
  for (const auto& l : lines) one_per_line += l + "\n";
  paragraphs = lines[0] + " " + lines[1] + "\n\n" + lines[2] + "  " + lines[3] + "\t" + lines[4] + "\n" + lines[5] + "\n";
  test::write_text(dir.file("lines.de"), one_per_line);
  test::write_text(dir.file("paragraphs.de"), paragraphs);
  const std::string base = tm() + " translate -m " + tiny_checkpoint() + " --dtype fp32 -q ";
  auto single = test::run_command("(" + base + "-i " + dir.file("lines.de") + " 2>/dev/null)");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  std::vector<std::string> t;
  std::istringstream in(single.output);
  for (std::string line; std::getline(in, line);) t.push_back(line);
  ASSERT_EQ(t.size(), 6u);
  auto split = test::run_command("(" + base + "--split-sentences -i " + dir.file("paragraphs.de") + " 2>/dev/null)");
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_EQ(split.output, t[0] + " " + t[1] + "\n\n" + t[2] + "  " + t[3] + "\t" + t[4] + "\n" + t[5] + "\n");

  auto aligned = test::run_command("(" + base + "--alignments -i " + dir.file("lines.de") + " 2>/dev/null)");
  ASSERT_EQ(aligned.exit_code, 0) << aligned.output;
  std::istringstream al(aligned.output);
  size_t n = 0;
  for (std::string line; std::getline(al, line); ++n) {
    const size_t bar = line.find(" ||| ");
    ASSERT_NE(bar, std::string::npos) << line;
    EXPECT_EQ(line.substr(0, bar), t[n]);
    for (const auto& pair : whitespace_words(line.substr(bar + 5)))
      EXPECT_NE(line.substr(bar + 5 + pair.begin, pair.end - pair.begin).find('-'), std::string::npos) << line;
  }
  EXPECT_EQ(n, 6u);

  test::write_text(dir.file("page.html"), "<html><body><h1>" + lines[0] + "</h1>\n<p>" + lines[1] + " <b>" + lines[2] +
                                              "</b></p><pre>" + lines[3] + "</pre></body></html>\n");
  auto html = test::run_command(base + "--format html -i " + dir.file("page.html") + " -o " + dir.file("page.en.html"));
  ASSERT_EQ(html.exit_code, 0) << html.output;
  const auto page = test::read_text(dir.file("page.en.html"));
  EXPECT_EQ(page.rfind("<html><body><h1>" + t[0] + "</h1>\n<p>", 0), 0u) << page;
  EXPECT_NE(page.find("</p><pre>" + lines[3] + "</pre></body></html>\n"), std::string::npos) << page;
  EXPECT_EQ(std::count(page.begin(), page.end(), '<'), 12) << page;  // every tag once (no '<' in the texts)

  for (const std::string& flags : std::vector<std::string>{"--format xml", "--split-sentences --source-language fr", "--alignments --beam 2 --nbest 2",
                                  "--split-sentences --target-prefix " + dir.file("lines.de"),
                                  "--format html --alignments", "--split-sentences --attention-svg x.svg"}) {
    auto bad = test::run_command(base + flags + " -i " + dir.file("lines.de"));
    EXPECT_EQ(bad.exit_code, 2) << flags << ": " << bad.output;
    EXPECT_EQ(count_lines(bad.output), 1u) << flags << ": " << bad.output;
  }
}

// Streaming: windows of --buffer-size lines give the same output as the whole input at once,
// whatever the workers; --unbuffered answers a line while the input is still open.
TEST(TranslateCommand, StreamsWindowByWindowAndLineByLine) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"),
                   "Guten Morgen.\nWie geht es dir?\n\nIch habe Hunger.\nDanke.\nEin Hund rennt.\nZwei Kinder spielen.\n");
  const std::string base = tm() + " translate -m " + tiny_checkpoint() + " --beam 2 --dtype fp32 ";  // bf16 rounds by batch
  auto whole = test::run_command("(" + base + "--buffer-size 1000 --workers 1 -i " + dir.file("in.de") + " 2>/dev/null)");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_EQ(count_lines(whole.output), 7u);
  for (const std::string flags : {"--buffer-size 2 --workers 2 --threads-per-worker 1", "--buffer-size 3", "--unbuffered",
                                  "--buffer-size 2 --tensor-pool"}) {
    auto piped = test::run_command("(" + base + flags + " < " + dir.file("in.de") + " 2>/dev/null)");
    EXPECT_EQ(piped.output, whole.output) << flags;
    auto r = test::run_command(base + flags + " -i " + dir.file("in.de") + " -o " + dir.file("out.en"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("translated 7 lines"), std::string::npos) << r.output;
    EXPECT_EQ(test::read_text(dir.file("out.en")), whole.output) << flags;
  }
  const std::string first = whole.output.substr(0, whole.output.find('\n'));
  auto live = test::run_command("bash -c 'coproc T { " + base + "--unbuffered 2>/dev/null; }; "
                                "echo \"Guten Morgen.\" >&${T[1]}; IFS= read -r -t 120 line <&${T[0]} && "
                                "echo \"got: $line\"; exec {T[1]}>&-; wait'");
  EXPECT_EQ(live.output, "got: " + first + "\n");
  auto bad = test::run_command(base + "--buffer-size 0 < /dev/null");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--buffer-size"), std::string::npos) << bad.output;
}

TEST(TranslateCommand, Int8TranslatesCheckpointsAndExportsAlike) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\n\nWie geht es dir?\n");
  const std::string input = " -i " + dir.file("in.de") + " 2>/dev/null)";
  auto checkpoint = test::run_command("(" + tm() + " translate -m " + tiny_checkpoint() + " --dtype int8" + input);
  ASSERT_EQ(checkpoint.exit_code, 0) << checkpoint.output;
  EXPECT_EQ(count_lines(checkpoint.output), 3u) << checkpoint.output;
  auto r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("model.ts"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto exported = test::run_command("(" + tm() + " translate -m " + dir.file("model.ts") + " --dtype int8" + input);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_EQ(exported.output, checkpoint.output);
  r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("int8.ts") + " --dtype int8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto int8 = test::run_command("(" + tm() + " translate -m " + dir.file("int8.ts") + input);
  ASSERT_EQ(int8.exit_code, 0) << int8.output;
  EXPECT_EQ(count_lines(int8.output), 3u) << int8.output;
  // The summary names the precision asked for, not the float type the rest runs in.
  for (const auto& model : {tiny_checkpoint(), dir.file("int8.ts")}) {
    auto summary = test::run_command(tm() + " translate -m " + model + " --dtype int8 -i " + dir.file("in.de") +
                                     " -o " + dir.file("out.en") + " 2>&1");
    EXPECT_NE(summary.output.find("target tokens/s, int8)"), std::string::npos) << summary.output;
  }
  // A frozen export has no weights left to quantize: one line naming the cause.
  r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("frozen.ts") + " --freeze");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(tm() + " translate -m " + dir.file("frozen.ts") + " --dtype int8 < " + dir.file("in.de"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("without --freeze"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
}

TEST(TranslateCommand, AnExportTranslatesLikeItsCheckpoint) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\n\nWie geht es dir?\nIch habe Hunger.\n");
  auto r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("model.ts"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The same flags for both files, n-best and token-budget batches included: one search.
  for (std::string flags : {"--beam 1", "--beam 5", "--beam 5 --nbest 3 --batch-source-tokens 20"}) {
    flags += " --dtype fp32 -i " + dir.file("in.de") + " 2>/dev/null)";
    auto native = test::run_command("(" + tm() + " translate -m " + tiny_checkpoint() + " " + flags);
    auto scripted = test::run_command("(" + tm() + " translate -m " + dir.file("model.ts") + " " + flags);
    ASSERT_EQ(native.exit_code, 0) << native.output;
    ASSERT_EQ(scripted.exit_code, 0) << scripted.output;
    EXPECT_GE(count_lines(scripted.output), 4u);
    // n-best lines end in a score: compare up to it (the two differ in the last bits only).
    auto without_scores = [](const std::string& text) {
      std::string out;
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);) out += line.substr(0, line.rfind(" ||| ")) + "\n";
      return out;
    };
    EXPECT_EQ(without_scores(scripted.output), without_scores(native.output)) << flags;
  }
}

TEST(TranslateCommand, AttentionPictureIsAnSvg) {
  test::TempDir dir;
  auto r = test::run_command("echo 'Guten Morgen.' | " + tm() + " translate -m " + tiny_checkpoint() +
                             " --attention-svg " + dir.file("att.svg") + " --attention-head 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto svg = test::read_text(dir.file("att.svg"));
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("head 1"), std::string::npos);
}

// A line over the model's length is translated cut, and the warning names it (counted across windows).
TEST(TranslateCommand, ALongLineIsTranslatedCutAndNamedByItsLine) {
  test::TempDir dir;
  std::string long_line;
  for (int i = 0; i < 100; ++i) long_line += "ein Hund läuft ";
  test::write_text(dir.file("in.de"), "Ein Hund.\nZwei Katzen.\n" + long_line + "\nEin Mann.\n");
  const auto r = test::run_command(tm() + " translate -q -m " + tiny_checkpoint() + " --buffer-size 2 -i " +
                                   dir.file("in.de") + " -o " + dir.file("out.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(test::read_text(dir.file("out.en"))), 4u);
  EXPECT_NE(r.output.find("1 input line longer than the model accepts, translated cut: line 3 of " + dir.file("in.de")),
            std::string::npos)
      << r.output;
}

TEST(TranslateCommand, BadInputIsAOneLineErrorWithNonZeroExit) {
  test::TempDir dir;
  auto r = test::run_command(tm() + " translate -m " + dir.file("missing.pt") + " < /dev/null");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing.pt"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " --beam 0 < /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " --beam 4294967298 < /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--beam must be between 1 and 1024"), std::string::npos) << r.output;
  // A flag's bad value is named by the flag, a config file's by its key.
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " --max-len-b 1x < /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-len-b is not an integer: '1x'"), std::string::npos) << r.output;
  test::write_text(dir.file("c.yaml"), "max_len_b: 1x\n");
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " --config " + dir.file("c.yaml") + " < /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("config key max_len_b is not an integer: '1x'"), std::string::npos) << r.output;
  // -o naming the input would replace the user's sources with their translations.
  test::write_text(dir.file("in.de"), "Ein Hund.\n");
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " -i " + dir.file("in.de") + " -o " +
                        dir.file("in.de"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is the -i/--input file"), std::string::npos) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_EQ(test::read_text(dir.file("in.de")), "Ein Hund.\n");
  r = test::run_command(tm() + " score -m " + tiny_checkpoint() + " --src " + dir.file("in.de") + " --tgt " +
                        dir.file("in.de") + " -o " + dir.file("in.de"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(test::read_text(dir.file("in.de")), "Ein Hund.\n");
  std::filesystem::copy_file(tiny_checkpoint(), dir.file("m.pt"));
  r = test::run_command(tm() + " export -m " + dir.file("m.pt") + " -o " + dir.file("m.pt"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is the -m/--model file"), std::string::npos) << r.output;
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " --bogus < /dev/null");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = test::run_command(tm() + " translate -m " + tiny_checkpoint() + " in.de < /dev/null");  // no -i
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unexpected argument 'in.de' (an input file goes after -i/--input)"), std::string::npos)
      << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  r = test::run_command("printf 'ok\\n\\377\\376\\n' | " + tm() + " translate -m " + tiny_checkpoint() +
                        " --strict-utf8");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("standard input:2: invalid UTF-8 at byte 1"), std::string::npos) << r.output;
  test::write_text(dir.file("corrupt.pt"), "PK\x03\x04 definitely not a checkpoint");
  r = test::run_command(tm() + " translate -m " + dir.file("corrupt.pt") + " < /dev/null");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("corrupt.pt"), std::string::npos) << r.output;
}

// One bad line is one bad line: invalid bytes become U+FFFD, a warning names the line, and
// every line is translated, from stdin and from a file.
TEST(TranslateCommand, InvalidUtf8IsReplacedAndEveryLineTranslated) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\n\xff\xfe kaputt\nDanke.\n");
  for (const std::string& input : {"-i " + dir.file("in.de"), "< " + dir.file("in.de")}) {
    auto r = test::run_command("(" + tm() + " translate -m " + tiny_checkpoint() + " " + input + " -o " +
                               dir.file("out.en") + ")");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(":2: invalid UTF-8 at byte 1: translated with 2 U+FFFD replacements"), std::string::npos)
        << r.output;
    EXPECT_EQ(count_lines(test::read_text(dir.file("out.en"))), 3u);
  }
}

// Target prefixes, sampling and the shortlist from the command line; their bad input is a
// one-line error with a non-zero exit.
// The first n lines of a command's output (empty strings where it has fewer).
std::vector<std::string> output_lines(const std::string& output, size_t n) {
  std::istringstream in(output);
  std::vector<std::string> lines(n);
  for (auto& line : lines) std::getline(in, line);
  return lines;
}

// `base` + `flags` fails with one line on stderr that holds `needle`.
void expect_one_line_error(const std::string& base, const std::string& flags, const std::string& needle) {
  auto e = test::run_command("(" + base + flags + " >/dev/null)");
  EXPECT_NE(e.exit_code, 0) << flags;
  EXPECT_NE(e.output.find(needle), std::string::npos) << flags << ": " << e.output;
  EXPECT_EQ(count_lines(e.output), 1u) << flags << ": " << e.output;
}

TEST(TranslateCommand, SteersWithPrefixesSamplingAndAShortlist) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\nWie geht es dir?\nEin Hund rennt.\n");
  test::write_text(dir.file("prefix.en"), "Good\n\nA dog\n");
  const std::string base = tm() + " translate -q -m " + tiny_checkpoint() + " -i " + dir.file("in.de") + " ";
  for (const std::string beam : {"1", "3"}) {
    auto r = test::run_command("(" + base + "--beam " + beam + " --target-prefix " + dir.file("prefix.en") + " 2>/dev/null)");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto out = output_lines(r.output, 3);
    EXPECT_EQ(out[0].rfind("Good", 0), 0u) << r.output;
    EXPECT_EQ(out[2].rfind("A dog", 0), 0u) << r.output;
  }
  // Sampling: the same seed, the same output, whatever the workers and windows.
  const std::string sample = base + "--sampling-topk 0 --seed 3 ";
  auto a = test::run_command("(" + sample + "--workers 1 2>/dev/null)");
  auto b = test::run_command("(" + sample + "--workers 2 --batch-size 1 --buffer-size 2 2>/dev/null)");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  // A shortlist built from the sample corpus with the model's tokenizer.
  auto r = test::run_command(tm() + " shortlist -m " + tiny_checkpoint() + " --src " + test::sample_de() + " --tgt " +
                             test::sample_en() + " -o " + dir.file("s.tsv") + " --per-source 5 --frequent 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command("(" + base + "--shortlist " + dir.file("s.tsv") + " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output), 3u) << r.output;

  auto expect_error = [&](const std::string& flags, const std::string& needle) { expect_one_line_error(base, flags, needle); };
  test::write_text(dir.file("short.en"), "Good\n");
  expect_error("--target-prefix " + dir.file("short.en"), "line counts differ");
  expect_error("--target-prefix " + dir.file("missing.en"), "missing.en");
  expect_error("--sampling-topk 0 --sampling-topp 1.5", "--sampling-topp must be in (0, 1]");
  expect_error("--sampling-topp 0.5", "--sampling-topk");
  expect_error("--sampling-topk 5 --beam 2", "--beam 1");
  expect_error("--seed -1 --sampling-topk 0", "--seed");
  std::string other = test::read_text(dir.file("s.tsv"));
  other.replace(other.find("target_vocabulary ") + 18, 4, "ffff");
  other.erase(other.rfind("# torchmt-crc32c:"));  // edited by hand: its checksum line deleted
  test::write_text(dir.file("other.tsv"), other);
  expect_error("--shortlist " + dir.file("other.tsv"), "another target vocabulary");
  expect_error("--shortlist " + dir.file("missing.tsv"), "missing.tsv");
}

// Terminology constraints: every phrase in its line's output, at any beam, with a shortlist
// that lacks them, and for the TorchScript export; a word the model never saw spelled by pieces.
TEST(TranslateCommand, ConstraintsAppearInEveryOutput) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\nWie geht es dir?\nEin Hund rennt.\n");
  test::write_text(dir.file("c.en"), "dog\tmorning\n\nZyxquorbl blue\n");
  auto r = test::run_command(tm() + " shortlist -m " + tiny_checkpoint() + " --src " + test::sample_de() + " --tgt " +
                             test::sample_en() + " -o " + dir.file("s.tsv") + " --per-source 2 --frequent 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = test::run_command(tm() + " export -m " + tiny_checkpoint() + " -o " + dir.file("model.ts"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string& model : {tiny_checkpoint(), dir.file("model.ts")})
    for (const std::string& flags : {std::string("--beam 1"), std::string("--beam 4"), "--beam 4 --shortlist " + dir.file("s.tsv")}) {
      r = test::run_command("(" + tm() + " translate -q -m " + model + " -i " + dir.file("in.de") + " --constraints " +
                            dir.file("c.en") + " " + flags + " 2>/dev/null)");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      const auto out = output_lines(r.output, 3);
      EXPECT_NE(out[0].find("dog"), std::string::npos) << flags << ": " << r.output;
      EXPECT_NE(out[0].find("morning"), std::string::npos) << flags << ": " << r.output;
      EXPECT_NE(out[2].find("Zyxquorbl blue"), std::string::npos) << flags << ": " << r.output;
    }
  const std::string base = tm() + " translate -q -m " + tiny_checkpoint() + " -i " + dir.file("in.de") + " ";
  auto expect_error = [&](const std::string& flags, const std::string& needle) { expect_one_line_error(base, flags, needle); };
  test::write_text(dir.file("short.en"), "dog\n");
  expect_error("--constraints " + dir.file("short.en"), "line counts differ");
  expect_error("--constraints " + dir.file("missing.en"), "missing.en");
  expect_error("--constraints " + dir.file("c.en") + " --sampling-topk 0", "constraints need beam search");
  std::string long_phrase;
  for (int i = 0; i < 300; ++i) long_phrase += "Zyxquorbl ";
  test::write_text(dir.file("long.en"), long_phrase + "\n\n\n");
  expect_error("--constraints " + dir.file("long.en"), "the model's output holds at most");
}

TEST(EvaluateCommand, TranslatesThenScoresAndChecksLineCounts) {
  test::TempDir dir;
  test::write_text(dir.file("src.de"), "Guten Morgen.\nDanke schön.\n");
  test::write_text(dir.file("ref.en"), "Good morning.\nThank you very much.\n");
  auto r = test::run_command("(" + tm() + " evaluate -m " + tiny_checkpoint() + " --src " + dir.file("src.de") +
                             " --ref " + dir.file("ref.en") + " --save-hyp " + dir.file("hyp.en") + " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("BLEU = ", 0), 0u) << r.output;
  EXPECT_EQ(count_lines(test::read_text(dir.file("hyp.en"))), 2u);
  test::write_text(dir.file("ref3.en"), "a\nb\nc\n");
  r = test::run_command(tm() + " evaluate -m " + tiny_checkpoint() + " --src " + dir.file("src.de") + " --ref " +
                        dir.file("ref3.en"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("line counts differ"), std::string::npos) << r.output;
  r = test::run_command(tm() + " evaluate --ref " + dir.file("ref.en"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

// Where the output goes is respected: a link's file is replaced and the link kept, a FIFO is
// written as the stream it is (a reader gets the lines), a full standard output fails the
// command (evaluate printed its score into /dev/full and said nothing), an empty reference is no
// score, a bad --dtype says every value, and line-ending characters between split sentences
// become spaces (one output line per input line).
TEST(TranslateCommand, OutputsGoWhereTheyAreNamedOrTheCommandFails) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\nDanke schön.\n");
  const std::string base = tm() + " translate -m " + tiny_checkpoint() + " --dtype fp32 -q -i " + dir.file("in.de");
  test::write_text(dir.file("target.en"), "old\n");
  std::filesystem::create_symlink(dir.file("target.en"), dir.file("link.en"));
  auto r = test::run_command(base + " -o " + dir.file("link.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link.en")));
  EXPECT_EQ(count_lines(test::read_text(dir.file("target.en"))), 2u);

  ASSERT_EQ(::mkfifo(dir.file("out.fifo").c_str(), 0600), 0);
  const int fifo = ::open(dir.file("out.fifo").c_str(), O_RDWR | O_NONBLOCK);  // (nothing waits on it)
  ASSERT_GE(fifo, 0);
  r = test::run_command(base + " -o " + dir.file("out.fifo"));
  char buffer[4096] = {};
  const ssize_t n = ::read(fifo, buffer, sizeof(buffer) - 1);
  ::close(fifo);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string through_fifo(buffer, n > 0 ? static_cast<size_t>(n) : 0);
  EXPECT_EQ(count_lines(through_fifo), 2u) << through_fifo;
  EXPECT_EQ(std::filesystem::status(dir.file("out.fifo")).type(), std::filesystem::file_type::fifo);

  test::write_text(dir.file("ref.en"), "Good morning.\nThank you.\n");
  r = test::run_command("(" + tm() + " evaluate --hyp " + dir.file("ref.en") + " --ref " + dir.file("ref.en") +
                        " > /dev/full)");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("torchmt evaluate: error: cannot write standard output"), std::string::npos) << r.output;
  test::write_text(dir.file("empty.en"), "");
  r = test::run_command(tm() + " evaluate --hyp " + dir.file("empty.en") + " --ref " + dir.file("empty.en"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("empty.en holds no lines"), std::string::npos) << r.output;
  r = test::run_command(base + " --dtype fp8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--dtype must be auto, fp32, bf16, fp16 or int8, got 'fp8'"), std::string::npos) << r.output;

  test::write_text(dir.file("breaks.de"), "Guten Morgen.\rDanke schön.\x0b Wie geht es?\xe2\x80\xa8Gut.\n");
  r = test::run_command("(" + base.substr(0, base.find(" -i ")) + " --split-sentences -i " + dir.file("breaks.de") +
                        " 2>/dev/null)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count_lines(r.output), 1u) << r.output;
  EXPECT_EQ(r.output.find_first_of("\r\v\f"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("\xe2\x80\xa8"), std::string::npos) << r.output;
}

// Every subcommand: --dump-config prints YAML that --config reads back to the same
// configuration, flags override the file, and bad files, keys and renamed flags are one-line
// usage errors.
TEST(ConfigFiles, EverySubcommandDumpsAndReadsItsConfiguration) {
  test::TempDir dir;
  for (std::string command : {"vocab", "train", "translate", "evaluate", "export", "average", "info"}) {
    auto dumped = test::run_command("(" + tm() + " " + command + " --dump-config 2>/dev/null)");
    ASSERT_EQ(dumped.exit_code, 0) << command << ": " << dumped.output;
    ASSERT_FALSE(dumped.output.empty()) << command;
    test::write_text(dir.file(command + ".yaml"), dumped.output);
    auto again = test::run_command("(" + tm() + " " + command + " --config " + dir.file(command + ".yaml") +
                                   " --dump-config 2>/dev/null)");
    ASSERT_EQ(again.exit_code, 0) << command << ": " << again.output;
    EXPECT_EQ(again.output, dumped.output) << command;
    // --help lists --config and --dump-config with the other options.
    auto help = test::run_command(tm() + " " + command + " --help");
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_NE(help.output.find("--dump-config"), std::string::npos) << command;
    // A key the command does not know is refused, naming it.
    test::write_text(dir.file("bad.yaml"), "no_such_option: 1\n");
    auto bad = test::run_command(tm() + " " + command + " --config " + dir.file("bad.yaml"));
    EXPECT_EQ(bad.exit_code, 2) << command << ": " << bad.output;
    EXPECT_NE(bad.output.find("no_such_option"), std::string::npos) << command << ": " << bad.output;
    EXPECT_EQ(count_lines(bad.output), 1u) << command << ": " << bad.output;
  }
  // Defaults appear in the help, typed once in the option structs.
  auto help = test::run_command(tm() + " translate --help");
  EXPECT_NE(help.output.find("(default: 0.6)"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--batch-source-tokens"), std::string::npos) << help.output;
  // Flags override the file.
  test::write_text(dir.file("t.yaml"), "beam: 4\nlenpen: 1.0\nmodel: a.pt\n");
  auto r = test::run_command(tm() + " translate --config " + dir.file("t.yaml") + " --beam 2 --dump-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("beam: 2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lenpen: 1\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model:\n  - a.pt\n"), std::string::npos) << r.output;  // a list: -m repeats (ensembles)
  // Renamed flags point to their new name; the old config keys still read.
  r = test::run_command(tm() + " translate -m x.pt --max-tokens 100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-tokens is now --batch-source-tokens"), std::string::npos) << r.output;
  r = test::run_command(tm() + " train --max-len 100");
  EXPECT_NE(r.output.find("--max-len is now --max-sentence-tokens"), std::string::npos) << r.output;
  test::write_text(dir.file("old.yaml"), "max_tokens: 1234\n");
  r = test::run_command(tm() + " train --config " + dir.file("old.yaml") + " --dump-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("batch_tokens: 1234\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is now called 'batch_tokens'"), std::string::npos) << r.output;
  // A missing or malformed file.
  r = test::run_command(tm() + " info --config " + dir.file("missing.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.yaml"), std::string::npos) << r.output;
  test::write_text(dir.file("broken.yaml"), "beam: [1\n");
  r = test::run_command(tm() + " translate --config " + dir.file("broken.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("broken.yaml"), std::string::npos) << r.output;
}

TEST(ConfigFiles, TranslateAndAverageRunFromAConfigFile) {
  test::TempDir dir;
  test::write_text(dir.file("in.de"), "Guten Morgen.\nWie geht es dir?\n");
  auto flags = test::run_command("(" + tm() + " translate -m " + tiny_checkpoint() + " -i " + dir.file("in.de") +
                                 " --beam 3 --nbest 2 --dtype fp32 2>/dev/null)");
  ASSERT_EQ(flags.exit_code, 0) << flags.output;
  test::write_text(dir.file("t.json"), "{\"model\": \"" + tiny_checkpoint() + "\", \"input\": \"" + dir.file("in.de") +
                                           "\", \"beam\": 3, \"nbest\": 2, \"dtype\": \"fp32\"}\n");
  auto config = test::run_command("(" + tm() + " translate --config " + dir.file("t.json") + " 2>/dev/null)");
  ASSERT_EQ(config.exit_code, 0) << config.output;
  EXPECT_EQ(config.output, flags.output);
  EXPECT_EQ(count_lines(config.output), 4u);
  // average: the checkpoints as a YAML list.
  test::write_text(dir.file("avg.yaml"), "output: " + dir.file("avg.pt") + "\ninputs:\n  - " + tiny_checkpoint() +
                                             "\n  - " + tiny_checkpoint() + "\n");
  auto avg = test::run_command(tm() + " average --config " + dir.file("avg.yaml"));
  ASSERT_EQ(avg.exit_code, 0) << avg.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("avg.pt")));
}

}  // namespace
}  // namespace torchmt
