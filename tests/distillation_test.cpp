// Distillation (torchmt distill): the teachers' corpus is their translation of the sources, saved a
// chunk at a time so that an interrupted run goes on where it stopped and a finished one is reused;
// the student trains on it, resumes, and gets a shortlist; bad options and files end in one line.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_support.h"
#include "test_support.h"
#include "data/shortlist.h"
#include "data/text_file.h"
#include "io/checkpoint.h"
#include "torchmt/loading/model_loader.h"
#include "torchmt/training/distillation.h"

namespace torchmt {
namespace {

namespace fs = std::filesystem;

constexpr size_t kDistillLines = 30;

// The first kDistillLines pairs of the sample, as train.de / train.en in `dir`.
void write_distill_sources(const std::string& dir) {
  auto de = read_lines(test::sample_de()), en = read_lines(test::sample_en());
  de.resize(kDistillLines);
  en.resize(kDistillLines);
  de[7] = "";             // left untranslated, kept in place
  de[11] = "bad \xff byte";  // the same
  de[20] = std::string((1 << 20) + 5, 'a');  // over the reader's 1 MB: the same
  write_lines(dir + "/train.de", de);
  write_lines(dir + "/train.en", en);
}

DistillOptions distill_options(const std::string& dir) {
  DistillOptions o;
  o.teacher.models = {test::tiny_checkpoint()};
  o.teacher.translation.search.beam_size = 3;
  o.teacher.device = "cpu";
  o.teacher.dtype = "fp32";
  o.teacher.threads = 1;
  o.chunk_lines = 8;
  o.student = test::tiny_run(dir + "/out", dir + "/train.de", dir + "/train.en");
  o.student.spm.clear();  // the teacher's, from its checkpoint
  o.student.max_steps = 2;
  return o;
}

// What the teacher says of the sources, as `translate` would (empty for the three unreadable lines).
std::vector<std::string> expected_teacher_lines(const std::string& dir) {
  TranslatorConfig config = distill_options(dir).teacher;
  Translator teacher = load_translator(config);
  auto sources = read_lines(dir + "/train.de");
  std::vector<std::string> readable;
  auto readable_line = [](const std::string& s) { return !s.empty() && s[4] != '\xff' && s.size() < (1 << 20); };
  for (const auto& s : sources)
    if (readable_line(s)) readable.push_back(s);
  auto translated = teacher.translate_text(readable, config.translation);
  std::vector<std::string> out;
  size_t next = 0;
  for (const auto& s : sources) out.push_back(readable_line(s) ? translated[next++] : "");
  return out;
}

// The teachers' copy of the sources: line for line, the one over 1 MB cut to it.
std::vector<std::string> expected_teacher_sources(const std::string& dir) {
  auto sources = read_lines(dir + "/train.de");
  sources[20].resize(1 << 20);
  return sources;
}

TEST(Distillation, TheTeachersCorpusIsTheirTranslationAndTheStudentTrainsOnIt) {
  test::TempDir dir;
  write_distill_sources(dir.path().string());
  const DistillSummary s = distill(distill_options(dir.path().string()));
  EXPECT_FALSE(s.interrupted);
  EXPECT_FALSE(s.teacher_reused);
  EXPECT_EQ(s.teacher_lines, static_cast<int64_t>(kDistillLines));
  EXPECT_EQ(s.untranslated_lines, 3);
  EXPECT_EQ(s.teacher_src, dir.path().string() + "/out/teacher/train.de");
  EXPECT_EQ(s.teacher_tgt, dir.path().string() + "/out/teacher/train.en");
  EXPECT_EQ(read_lines(s.teacher_src), expected_teacher_sources(dir.path().string()));
  EXPECT_EQ(read_lines(s.teacher_tgt), expected_teacher_lines(dir.path().string()));
  EXPECT_FALSE(fs::exists(dir.path().string() + "/out/teacher/progress.json"));
  // The student shares the teacher's vocabulary, trained on the teacher's lines, and has a shortlist.
  EXPECT_EQ(s.student.steps, 2);
  EXPECT_TRUE(fs::exists(dir.path().string() + "/out/student/checkpoint_last.pt"));
  EXPECT_EQ(load_translator(dir.path().string() + "/out/student/checkpoint_last.pt", torch::kCPU, torch::kFloat)
                .src_tokenizer()
                .checksum(),
            test::sample_tokenizer().checksum());
  EXPECT_EQ(s.shortlist, dir.path().string() + "/out/shortlist.txt");
  EXPECT_NO_THROW(Shortlist::load(s.shortlist, test::sample_tokenizer(), test::sample_tokenizer()));

  // Again: nothing is translated, the student resumes where it ended (its limit: no step more).
  DistillOptions again = distill_options(dir.path().string());
  again.student.max_steps = 3;
  const DistillSummary r = distill(again);
  EXPECT_TRUE(r.teacher_reused);
  EXPECT_EQ(r.student.steps, 1);
  EXPECT_EQ(read_lines(r.teacher_tgt), read_lines(s.teacher_tgt));

  // A copy of the teachers' directory elsewhere is reused there too (its record names its own files).
  // (File by file: CUDA LibTorch's recursive fs::copy crashes; see atomic_file_test.cpp.)
  fs::create_directories(dir.path().string() + "/copy/teacher");
  for (const auto& entry : fs::directory_iterator(dir.path().string() + "/out/teacher"))
    fs::copy_file(entry.path(), dir.path().string() + "/copy/teacher/" + entry.path().filename().string());
  DistillOptions copied = distill_options(dir.path().string());
  copied.student.out = dir.path().string() + "/copy";
  const DistillSummary c = distill(copied);
  EXPECT_TRUE(c.teacher_reused);
  EXPECT_EQ(c.teacher_tgt, dir.path().string() + "/copy/teacher/train.en");

  // Another search makes other teacher lines: a student trained on the old ones is not resumed on them.
  DistillOptions other = distill_options(dir.path().string());
  other.teacher.translation.search.beam_size = 2;
  EXPECT_NE(test::error_of([&] { distill(other); }).find("holds a student trained on other teacher translations"),
            std::string::npos);
}

TEST(Distillation, AnInterruptedTeacherGoesOnFromItsLastSavedChunk) {
  test::TempDir dir;
  write_distill_sources(dir.path().string());
  TrainHooks hooks;
  std::vector<std::string> lines;
  hooks.on_progress = [&](int64_t, const std::string& line) {
    lines.push_back(line);
    if (line.find("teachers: 16 of 30 lines saved") != std::string::npos) request_training_stop();
  };
  const DistillSummary first = distill(distill_options(dir.path().string()), hooks);
  EXPECT_TRUE(first.interrupted);
  EXPECT_FALSE(fs::exists(dir.path().string() + "/out/student"));
  const std::string partial = dir.path().string() + "/out/teacher/train.en.partial";
  ASSERT_TRUE(fs::exists(partial));
  EXPECT_EQ(read_lines(partial).size(), 16u);  // two chunks of 8; the third was cut short

  lines.clear();
  const DistillSummary second = distill(distill_options(dir.path().string()), hooks);
  EXPECT_FALSE(second.interrupted);
  EXPECT_FALSE(second.teacher_reused);
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("going on from line 16 of 30") != std::string::npos; }),
            lines.end());
  EXPECT_EQ(read_lines(second.teacher_tgt), expected_teacher_lines(dir.path().string()));
  EXPECT_EQ(read_lines(second.teacher_src), expected_teacher_sources(dir.path().string()));
  EXPECT_FALSE(fs::exists(partial));
}

TEST(Distillation, TheStudentCanLearnFromTheOriginalPairsToo) {
  test::TempDir dir;
  write_distill_sources(dir.path().string());
  DistillOptions o = distill_options(dir.path().string());
  o.with_originals = true;
  const DistillSummary s = distill(o);
  EXPECT_EQ(s.student.steps, 2);
  const std::string corpora = test::read_text(dir.path().string() + "/out/teacher/corpora.yaml");
  EXPECT_NE(corpora.find("name: teachers"), std::string::npos);
  EXPECT_NE(corpora.find("name: originals"), std::string::npos);
  EXPECT_NE(test::read_text(dir.path().string() + "/out/student/config.yaml").find("corpora.yaml"), std::string::npos);
}

// Back-translation: a teacher that translates both ways also translates the targets into
// OUT/teacher/back/, and the student learns from those pairs too; a one-way teacher is refused.
TEST(Distillation, TeachersThatTranslateBothWaysTranslateTheTargetsBackToo) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  write_distill_sources(d);
  // The tiny model as a --both-directions one (its columns not recorded: every piece open either way).
  auto both = load_checkpoint(test::tiny_checkpoint(), torch::kCPU);
  both.meta.both_directions = true;
  save_checkpoint(d + "/both.pt", both.model, nullptr, both.meta);

  DistillOptions o = distill_options(d);
  o.teacher.models = {d + "/both.pt"};
  o.back_translate = true;
  o.student.init_from = d + "/both.pt";  // the student continues its teacher: no --spm, no spm.model of its own
  o.student.max_sentence_tokens = 60;    // within the tiny model's 64 positions
  std::vector<std::string> lines;
  TrainHooks hooks;
  hooks.on_progress = [&](int64_t, const std::string& line) { lines.push_back(line); };
  const DistillSummary s = distill(o, hooks);
  EXPECT_FALSE(s.interrupted);
  EXPECT_EQ(s.teacher_lines, static_cast<int64_t>(kDistillLines));
  EXPECT_EQ(s.back_lines, static_cast<int64_t>(kDistillLines));
  EXPECT_EQ(s.untranslated_lines, 3);  // the sources' three; every target is readable
  EXPECT_EQ(s.back_tgt, d + "/out/teacher/back/train.en");
  EXPECT_EQ(s.back_src, d + "/out/teacher/back/train.de");
  EXPECT_EQ(read_lines(s.back_tgt), read_lines(d + "/train.en"));
  TranslatorConfig config = o.teacher;
  Translator teacher = load_translator(config);
  EXPECT_EQ(read_lines(s.back_src), teacher.translate_text(read_lines(d + "/train.en"), config.translation));
  EXPECT_NE(std::find_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("teachers, back: 30 of 30 lines saved") != std::string::npos; }),
            lines.end());
  const std::string corpora = test::read_text(d + "/out/teacher/corpora.yaml");
  EXPECT_NE(corpora.find("name: teachers"), std::string::npos);
  EXPECT_NE(corpora.find("name: back"), std::string::npos);
  EXPECT_EQ(corpora.find("name: originals"), std::string::npos);
  EXPECT_EQ(s.student.steps, 2);
  EXPECT_NO_THROW(Shortlist::load(s.shortlist, test::sample_tokenizer(), test::sample_tokenizer()));

  // Again: both ways reused, nothing translated.
  o.student.max_steps = 3;
  const DistillSummary again = distill(o);
  EXPECT_TRUE(again.teacher_reused);
  EXPECT_EQ(read_lines(again.back_src), read_lines(s.back_src));

  // A teacher that translates one way cannot translate back: one line, before it translates anything.
  DistillOptions one_way = distill_options(d);
  one_way.student.out = d + "/one_way";
  one_way.back_translate = true;
  const std::string error = test::error_of([&] { distill(one_way); });
  EXPECT_NE(error.find("--back-translate"), std::string::npos) << error;
  EXPECT_NE(error.find("--both-directions"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(d + "/one_way/teacher/manifest.json"));  // no forward corpus either
  EXPECT_FALSE(fs::exists(d + "/one_way/student"));
}

TEST(Distillation, BadOptionsAndFilesAreOneLine) {
  test::TempDir dir;
  write_distill_sources(dir.path().string());
  auto error = [&](const std::function<void(DistillOptions&)>& change) {
    DistillOptions o = distill_options(dir.path().string());
    change(o);
    return test::error_of([&] { distill(o); });
  };
  EXPECT_NE(error([](DistillOptions& o) { o.teacher.models.clear(); }).find("--teacher-model"), std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) { o.teacher.models = {"/nonexistent/teacher.pt"}; })
                .find("/nonexistent/teacher.pt"),
            std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) { o.student.train_src = "/nonexistent/train.de"; }).find("/nonexistent/train.de"),
            std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) { o.teacher.translation.search.nbest = 4; }).find("--teacher-nbest"),
            std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) {
              o.with_originals = true;
              o.student.train_tgt.clear();
            }).find("--with-originals needs --train-tgt"),
            std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) {
              o.back_translate = true;
              o.student.train_tgt.clear();
            }).find("--back-translate needs --train-tgt"),
            std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) { o.chunk_lines = 0; }).find("--chunk-lines"), std::string::npos);
  EXPECT_NE(error([](DistillOptions& o) { o.student.train_data = "corpora.yaml"; }).find("--train-data"),
            std::string::npos);
  // A budget the teachers use up leaves the student nothing: said, not a student of 0 minutes.
  EXPECT_NE(error([](DistillOptions& o) {
              o.student.max_steps = 0;
              o.student.max_minutes = 1e-4;
            }).find("leaves the student nothing"),
            std::string::npos);
  // A damaged record of an earlier run names the file and what to do.
  fs::create_directories(dir.path().string() + "/out/teacher");
  test::write_text(dir.path().string() + "/out/teacher/manifest.json", "{not json");
  EXPECT_NE(error([](DistillOptions&) {}).find("manifest.json is damaged"), std::string::npos);
  // So is one that parses but lacks what it must hold.
  fs::remove(dir.path().string() + "/out/teacher/manifest.json");
  ASSERT_EQ(error([](DistillOptions&) {}), "");
  const std::string manifest = dir.path().string() + "/out/teacher/manifest.json";
  std::string text = test::read_text(manifest);
  text.replace(text.find("\"lines\""), 7, "\"linez\"");
  test::write_text(manifest, text);
  EXPECT_NE(error([](DistillOptions&) {}).find("manifest.json is damaged"), std::string::npos);
}

TEST(DistillCommand, RunsEndToEndAndRefusesABadFlagInOneLine) {
  test::TempDir dir;
  write_distill_sources(dir.path().string());
  const std::string command = test::torchmt_binary() + " distill --teacher-model " + test::tiny_checkpoint() +
                              " --teacher-beam 2 --teacher-dtype fp32 --teacher-threads 1 --train-src " +
                              dir.path().string() + "/train.de --train-tgt " + dir.path().string() +
                              "/train.en --preset tiny --max-steps 2 --batch-tokens 600 --threads 1 --dtype fp32 "
                              "--out " + dir.path().string() + "/out";
  const auto ok = test::run_command(command);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("--dtype int8 --shortlist " + dir.path().string() + "/out/shortlist.txt"), std::string::npos)
      << ok.output;
  const auto bad = test::run_command(command + " --teacher-beam 0");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--teacher-beam must be between 1 and 1024"), std::string::npos) << bad.output;
  // Sides that disagree are refused before the teachers translate anything.
  test::write_text(dir.path().string() + "/short.en", "A dog.\n");
  const auto mismatch = test::run_command(test::torchmt_binary() + " distill --teacher-model " + test::tiny_checkpoint() +
                                          " --train-src " + dir.path().string() + "/train.de --train-tgt " +
                                          dir.path().string() + "/short.en --preset tiny --max-steps 2 --out " +
                                          dir.path().string() + "/out2");
  EXPECT_EQ(mismatch.exit_code, 1) << mismatch.output;
  EXPECT_NE(mismatch.output.find("short.en"), std::string::npos) << mismatch.output;
  EXPECT_FALSE(fs::exists(dir.path().string() + "/out2/teacher")) << mismatch.output;
}

}  // namespace
}  // namespace torchmt
