// The NCCL id through a shared file: a round trip of arbitrary bytes, a reader that starts first, and a
// stale file from another launch that is not taken.
#include <gtest/gtest.h>

#include <thread>

#include "dist/bootstrap_file.h"
#include "testing/files.h"

namespace tern::dist {
namespace {

using std::chrono::milliseconds;

const std::string kSecret("\x00\x01\n\xff tern\x7f", 10);

TEST(BootstrapFile, RoundTripsAnyBytes) {
  testing::TempDir dir;
  const std::string path = dir / "nccl.id";
  ASSERT_TRUE(PublishBootstrapFile(path, "4711.0", kSecret).ok());
  Result<std::string> got = ReadBootstrapFile(path, "4711.0", kSecret.size(), milliseconds(1000));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, kSecret);
}

TEST(BootstrapFile, AReaderWaitsForTheWriter) {
  testing::TempDir dir;
  const std::string path = dir / "nccl.id";
  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(PublishBootstrapFile(path, "job", kSecret).ok());
  });
  Result<std::string> got = ReadBootstrapFile(path, "job", kSecret.size(), milliseconds(10000));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, kSecret);
}

TEST(BootstrapFile, AFileFromAnotherLaunchIsNotTaken) {
  testing::TempDir dir;
  const std::string path = dir / "nccl.id";
  ASSERT_TRUE(PublishBootstrapFile(path, "4711.0", kSecret).ok());
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> got = ReadBootstrapFile(path, "4712.0", kSecret.size(), milliseconds(300));
  ASSERT_FALSE(got.ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
  EXPECT_EQ(got.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("another launch (tag '4711.0'"), std::string::npos)
      << got.status().message();
}

TEST(BootstrapFile, NoFileTimesOutNamingThePath) {
  testing::TempDir dir;
  const std::string path = dir / "never";
  Result<std::string> got = ReadBootstrapFile(path, "", 4, milliseconds(100));
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(path), std::string::npos);
  EXPECT_NE(got.status().message().find("filesystem every rank shares"), std::string::npos);
}

}  // namespace
}  // namespace tern::dist
