// The one progress reporter: what a draw says, how each style draws, and the commands that
// show it on a terminal (run under a pseudo-terminal with script(1)).
#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

#include "data_test_support.h"
#include "util/progress.h"

namespace torchmt {
namespace {

TEST(Progress, SaysDoneRateShareAndEta) {
  EXPECT_EQ(Progress::describe("lines", 1234567, -1, 10.0), "1,234,567 lines, 123456.7 lines/s, 0:10");
  // 250 of 1,000 in 50 s: 5 lines/s, 750 left, 150 s.
  EXPECT_EQ(Progress::describe("lines", 250, 1000, 50.0), "250 lines, 5.0 lines/s, 25% of 1,000, ETA 2:30, 0:50");
  EXPECT_EQ(Progress::describe("pairs", 1000, 1000, 4500.0), "1,000 pairs, 0.2 pairs/s, 100% of 1,000, 1:15:00");
  EXPECT_EQ(Progress::describe("lines", 0, 10, 0.0), "0 lines, 0.0 lines/s, 0% of 10, 0:00");
}

TEST(Progress, ATerminalRedrawsOneLineALogGetsPlainLinesQuietGetsNothing) {
  std::ostringstream terminal, log, quiet;
  {
    Progress t("work", "lines", 3, ProgressStyle::kTerminal, terminal, std::chrono::milliseconds(0));
    Progress l("work", "lines", 3, ProgressStyle::kLines, log, std::chrono::milliseconds(0));
    Progress q("work", "lines", 3, ProgressStyle::kQuiet, quiet, std::chrono::milliseconds(0));
    for (int i = 0; i < 3; ++i) {
      t.add(1);
      l.add(1);
      q.add(1);
    }
  }  // finish() on destruction
  const std::string drawn = terminal.str();
  EXPECT_EQ(drawn.find('\n'), drawn.size() - 1) << drawn;  // one line, ended once at the finish
  EXPECT_EQ(std::count(drawn.begin(), drawn.end(), '\r'), 5) << drawn;  // at start, 3 adds, finish
  EXPECT_NE(drawn.find("\033[K"), std::string::npos);
  EXPECT_NE(drawn.rfind("work: 3 lines"), std::string::npos) << drawn;
  const std::string lines = log.str();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3) << lines;
  EXPECT_EQ(lines.find('\r'), std::string::npos) << lines;
  EXPECT_EQ(lines.find("\033"), std::string::npos) << lines;
  EXPECT_TRUE(quiet.str().empty()) << quiet.str();
}

TEST(Progress, ARunsStatusIsRedrawnOnATerminalAndPrintedWhenDueInALog) {
  std::ostringstream terminal, log, quiet;
  {
    Progress t(ProgressStyle::kTerminal, terminal), l(ProgressStyle::kLines, log), q(ProgressStyle::kQuiet, quiet);
    for (Progress* p : {&t, &l, &q}) {
      p->status("step 1", false);
      p->status("step 2", true);
      p->line("valid | step 2");
      p->status("step 3", false);
    }
  }
  EXPECT_EQ(terminal.str(), "\rstep 1\033[K\rstep 2\033[K\nvalid | step 2\n\rstep 3\033[K\n");
  EXPECT_EQ(log.str(), "step 2\nvalid | step 2\n");  // only what was due, and the lines
  EXPECT_TRUE(quiet.str().empty()) << quiet.str();
}

TEST(Progress, WorkersAddConcurrentlyAndAnIntervalLimitsDraws) {
  std::ostringstream log;
  Progress p("work", "lines", -1, ProgressStyle::kLines, log, std::chrono::hours(1));
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w)
    workers.emplace_back([&p] {
      for (int i = 0; i < 10000; ++i) p.add(1);
    });
  for (auto& w : workers) w.join();
  EXPECT_EQ(p.done(), 40000);
  p.finish();
  EXPECT_TRUE(log.str().empty()) << log.str();  // the interval never passed
}

// Under a pseudo-terminal (stderr a tty) translate, evaluate and vocab draw a live line;
// --quiet and a pipe (the other tests) do not.
TEST(Progress, CommandsShowItOnATerminal) {
  test::TempDir dir;
  const std::string tm = test::torchmt_binary();
  test::write_text(dir.file("in.de"), "Guten Morgen.\n\nWie geht es dir?\n");
  test::write_text(dir.file("ref.en"), "Good morning.\n\nHow are you?\n");
  const auto in_terminal = [&](const std::string& command) {
    return test::run_command("script -qec '" + command + "' /dev/null < /dev/null");
  };
  auto r = in_terminal(tm + " translate -m " + test::tiny_checkpoint() + " -i " + dir.file("in.de") + " -o " +
                       dir.file("out.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\rtranslate: 3 lines"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("100% of 3"), std::string::npos) << r.output;
  r = in_terminal(tm + " translate -q -m " + test::tiny_checkpoint() + " -i " + dir.file("in.de") + " -o " +
                  dir.file("out.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("\rtranslate:"), std::string::npos) << r.output;
  r = in_terminal(tm + " evaluate -m " + test::tiny_checkpoint() + " --src " + dir.file("in.de") + " --ref " +
                  dir.file("ref.en"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\revaluate: translate: 3 lines"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("BLEU = "), std::string::npos) << r.output;
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += "ein Hund läuft " + std::to_string(i) + " mal durch das Gras.\n";
  test::write_text(dir.file("corpus.txt"), corpus);
  r = in_terminal(tm + " vocab --src " + dir.file("corpus.txt") + " --tgt " + dir.file("corpus.txt") + " --out " +
                  dir.file("spm") + " --vocab-size 60");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": reading: 600 lines"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace torchmt
