// atomic_write: the new content or the old one, never a partial file or a leftover
// temporary, also when the write fails for real (a file-size limit makes write() fail with
// EFBIG the way a full disk fails with ENOSPC).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "test_support.h"
#include "util/atomic_file.h"
#include "util/utf8.h"

namespace torchmt {
namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  return out;
}

TEST(AtomicWrite, WritesReplacesAndLeavesNoTemporary) {
  test::TempDir dir;
  const auto path = dir.file("a.txt");
  atomic_write(path, "first");
  EXPECT_EQ(read_file(path), "first");
  atomic_write(path, std::string(100000, 'x'));
  EXPECT_EQ(read_file(path).size(), 100000u);
  atomic_copy(path, dir.file("b.txt"));
  EXPECT_EQ(read_file(dir.file("b.txt")), read_file(path));
  EXPECT_EQ(names_in(dir.path().string()).size(), 2u);
}

TEST(SameFileTwice, AnOutputThatIsAnInputOrAnotherOutputIsNamed) {
  test::TempDir dir;
  const auto in = dir.file("in.de"), out = dir.file("out.en");
  atomic_write(in, "Ein Hund.\n");
  std::filesystem::create_symlink(in, dir.file("link.de"));
  EXPECT_EQ(same_file_twice({{"--src", in}}, {{"-o", out}}), std::nullopt);
  EXPECT_EQ(same_file_twice({{"--src", "-"}}, {{"-o", "-"}, {"--scores", ""}, {"--dropped", ""}}), std::nullopt);
  EXPECT_EQ(same_file_twice({{"--src", in}}, {{"-o", in}}).value_or(""),
            "-o '" + in + "' is the --src file: writing it would replace that input");
  // Another spelling of it, and a link to it, are the same file.
  const std::string dotted = dir.path().string() + "/./in.de";
  EXPECT_NE(same_file_twice({{"--src", in}}, {{"-o", dotted}}), std::nullopt);
  EXPECT_NE(same_file_twice({{"--src", in}}, {{"-o", dir.file("link.de")}}), std::nullopt);
  // Two outputs that do not exist yet, one file.
  EXPECT_EQ(same_file_twice({{"--src", in}}, {{"--kept-src", out}, {"--kept-tgt", out}}).value_or(""),
            "--kept-src and --kept-tgt name the same file '" + out + "'");
}

TEST(AtomicWrite, AFailedWriteKeepsThePreviousFile) {
  test::TempDir dir;
  const auto path = dir.file("checkpoint.pt");
  atomic_write(path, "previous");
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() returns EFBIG instead
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    atomic_write(path, std::string(1 << 20, 'y'));
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_NE(message.find("cannot write " + path), std::string::npos) << message;
  EXPECT_NE(message.find("too large"), std::string::npos) << message;
  EXPECT_EQ(read_file(path), "previous");
  EXPECT_EQ(names_in(dir.path().string()), std::vector<std::string>{"checkpoint.pt"});
}

// The replacement keeps the previous file's mode; a new file gets the umask's; a link is written
// through to its file; a FIFO is written as a stream (renaming a file over it would leave its
// reader with nothing and the FIFO gone).
TEST(AtomicWrite, ModesLinksAndFifosStayWhatTheyWere) {
  namespace fs = std::filesystem;
  test::TempDir dir;
  const auto path = dir.file("kept.txt");
  atomic_write(path, "one");
  ::chmod(path.c_str(), 0600);
  atomic_write(path, "two");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  const mode_t before = ::umask(027);
  atomic_write(dir.file("new.txt"), "x");
  ::umask(before);
  EXPECT_EQ(fs::status(dir.file("new.txt")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);

  fs::create_symlink("kept.txt", dir.file("link.txt"));
  atomic_write(dir.file("link.txt"), "three");
  EXPECT_TRUE(fs::is_symlink(dir.file("link.txt")));
  EXPECT_EQ(read_file(path), "three");

  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  // Held open for reading and writing: the writer's open does not wait, and a writer that
  // replaced the FIFO instead leaves nothing to read, not a test that waits forever.
  const int fifo = ::open(dir.file("pipe").c_str(), O_RDWR | O_NONBLOCK);
  ASSERT_GE(fifo, 0);
  atomic_write(dir.file("pipe"), "through the pipe");
  char got[64] = {};
  EXPECT_EQ(::read(fifo, got, sizeof(got) - 1), 16);
  ::close(fifo);
  EXPECT_STREQ(got, "through the pipe");
  EXPECT_EQ(fs::status(dir.file("pipe")).type(), fs::file_type::fifo);
  EXPECT_EQ(names_in(dir.path().string()).size(), 4u);  // no temporary left
}

// What a signal handler calls before the process dies: the unfinished writers' temporaries go,
// the previous files stay.
TEST(AtomicWrite, PendingTemporariesAreRemovedOnRequest) {
  test::TempDir dir;
  atomic_write(dir.file("out.txt"), "previous");
  {
    AtomicFileWriter writer(dir.file("out.txt"));
    writer.write("half of it");
    EXPECT_EQ(names_in(dir.path().string()).size(), 2u);
    remove_pending_temporaries();
    EXPECT_EQ(names_in(dir.path().string()), std::vector<std::string>{"out.txt"});
  }
  EXPECT_EQ(read_file(dir.file("out.txt")), "previous");
  AtomicFileWriter committed(dir.file("out.txt"));
  committed.write("new");
  committed.commit();
  remove_pending_temporaries();  // a committed file is no temporary
  EXPECT_EQ(read_file(dir.file("out.txt")), "new");
}

TEST(AtomicWrite, UnwritableDirectoryIsAClearError) {
  EXPECT_THROW(atomic_write("/nonexistent-dir/x.txt", "x"), std::runtime_error);
  EXPECT_THROW(read_file("/nonexistent-dir/x.txt"), std::runtime_error);
}

TEST(Utf8, OneValidatorForEveryLayer) {
  EXPECT_FALSE(find_invalid_utf8("Straße 😀").has_value());
  EXPECT_EQ(find_invalid_utf8("ab\xff" "c"), std::optional<size_t>(2));
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));  // surrogate
  EXPECT_EQ(encode_utf8(*decode_utf8("Öl 😀")), "Öl 😀");
  EXPECT_THROW(decode_utf8_or_throw("\xc3", "input"), std::invalid_argument);
}

// Replacement as Python's bytes.decode("utf-8", "replace") does it (expected values from Python):
// one U+FFFD per maximal ill-formed subpart.
TEST(Utf8, ReplacementMatchesPythonsDecoder) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ab\xff" "c", "ab" + r + "c"},
      {"\xe2\x82", r},
      {"\xf0(\x8c(", r + "(" + r + "("},
      {"\xed\xa0\x80", r + r + r},
      {"\xc0\xaf", r + r},
      {"\xf4\x90\x80\x80", r + r + r + r},
      {"ok\xe2\x82\xac\xe2\x82x", "ok\xe2\x82\xac" + r + "x"},
      {"\xf0\x9f\x98", r},
      {"Straße 😀", "Straße 😀"},
  };
  for (const auto& [in, expected] : cases) {
    size_t replaced = 0;
    EXPECT_EQ(replace_invalid_utf8(in, &replaced), expected);
    EXPECT_TRUE(is_valid_utf8(replace_invalid_utf8(in)));
    EXPECT_EQ(replaced == 0, is_valid_utf8(in));
  }
}

}  // namespace
}  // namespace torchmt

// CUDA LibTorch's libtorch.so exports its own copies of std::filesystem::remove_all and the
// recursive fs::copy, which crash when our programs call them (three preprocess tests did on an
// H100 machine): trees are removed with remove_tree, and nothing calls those two.
TEST(RemoveTree, RemovesATreeAndNothingCallsTheFilesystemCopiesThatCrashUnderCudaLibTorch) {
  namespace fs = std::filesystem;
  torchmt::test::TempDir dir;
  fs::create_directories(dir.file("a/b/c"));
  torchmt::test::write_text(dir.file("a/b/c/f"), "x");
  torchmt::test::write_text(dir.file("a/g"), "y");
  EXPECT_TRUE(torchmt::remove_tree(dir.file("a")));
  EXPECT_FALSE(fs::exists(dir.file("a")));
  EXPECT_TRUE(torchmt::remove_tree(dir.file("a")));  // already gone: nothing to do
  const std::string banned[] = {std::string("remove_") + "all(", std::string("copy_options::") + "recursive"};
  int files = 0;
  for (const char* where : {"src", "include", "tests", "tools"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(torchmt::test::source_dir()) / where)) {
      const auto ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      ++files;
      const std::string text = torchmt::test::read_text(entry.path().string());
      for (const auto& call : banned)
        EXPECT_EQ(text.find(call), std::string::npos) << entry.path().string() << " calls " << call;
    }
  }
  EXPECT_GT(files, 100);
}
