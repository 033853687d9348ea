// Atomic file writes: the target is replaced whole, a failed write leaves the old contents, and no temp file
// is left behind either way; and the small read/mkdir/sync helpers beside them.
#include "core/file_util.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "testing/files.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;

// Every name in the directory (to catch a leftover "<name>.tmp.<pid>").
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(WriteFileAtomic, CreatesThenReplacesTheFileWhole) {
  TempDir dir;
  const std::string path = dir / "state.json";
  ASSERT_TRUE(WriteFileAtomic(path, "a long first version of the file\n").ok());
  EXPECT_EQ(ReadFile(path), "a long first version of the file\n");
  // Shorter contents: nothing of the old file's tail survives (a rename, not an overwrite in place).
  const std::string binary("new\0bytes", 9);
  ASSERT_TRUE(WriteFileAtomic(path, binary).ok());
  EXPECT_EQ(ReadFile(path), binary);
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"state.json"}) << "no temp file left";
}

// RLIMIT_FSIZE makes the write itself fail (EFBIG) part-way, even for root, where permissions would not.
TEST(WriteFileAtomic, AFailedWriteLeavesTheOldContentsAndNoTempFile) {
  TempDir dir;
  const std::string path = dir / "state.json";
  ASSERT_TRUE(WriteFileAtomic(path, "old").ok());
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = 64 * 1024;
  auto* old_handler = ::signal(SIGXFSZ, SIG_IGN);  // else the write kills the process instead of failing
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status st = WriteFileAtomic(path, std::string(1 << 20, 'x'));
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("writing"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadFile(path), "old");
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"state.json"}) << "the temp file is removed";
}

TEST(WriteFileAtomic, AFailedRenameLeavesTheTargetAndNoTempFile) {
  TempDir dir;
  const std::string path = dir / "taken";
  testing::WriteFile(path + "/inside", "kept");  // a non-empty directory cannot be renamed over
  const Status st = WriteFileAtomic(path, "new");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rename"), std::string::npos) << st.ToString();
  EXPECT_EQ(ReadFile(path + "/inside"), "kept");
  EXPECT_EQ(Names(dir.path()), std::vector<std::string>{"taken"});
}

TEST(WriteFileAtomic, AMissingDirectoryIsAnErrorNamingTheFile) {
  TempDir dir;
  const std::string path = dir / "no/such/dir/file";
  const Status st = WriteFileAtomic(path, "x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.ToString();
  EXPECT_TRUE(Names(dir.path()).empty());
}

TEST(FileUtil, ReadMakeDirsAndSync) {
  TempDir dir;
  Result<std::string> missing = ReadFileToString(dir / "absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kIoError);
  EXPECT_NE(missing.status().message().find(dir / "absent"), std::string::npos);

  ASSERT_TRUE(MakeDirs(dir / "a/b/c").ok());
  EXPECT_TRUE(fs::is_directory(dir / "a/b/c"));
  EXPECT_TRUE(MakeDirs(dir / "a/b/c").ok()) << "an existing directory is fine";
  testing::WriteFile(dir / "plain", "x");
  EXPECT_FALSE(MakeDirs(dir / "plain/sub").ok()) << "below a regular file";

  const std::string bytes("\0\1\2 binary \xff", 12);
  ASSERT_TRUE(WriteFileAtomic(dir / "a/b/c/f", bytes).ok());
  Result<std::string> back = ReadFileToString(dir / "a/b/c/f");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, bytes);

  EXPECT_TRUE(SyncParentDir(dir / "a/b/c/f").ok());
  EXPECT_FALSE(SyncParentDir(dir / "nope/f").ok());
}

}  // namespace
}  // namespace tern
