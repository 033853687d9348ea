#include "data/shard.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>
#include <xxhash.h>

#include "testing/files.h"

namespace tern {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::vector<int32_t> Ramp(size_t n, uint32_t vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919) % vocab);
  return v;
}

Status WriteShard(const std::string& path, uint32_t vocab, const std::vector<int32_t>& tokens) {
  TERN_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(path, vocab));
  // Several appends, to cross the writer's buffer boundary at odd offsets.
  size_t half = tokens.size() / 3;
  TERN_RETURN_IF_ERROR(w->Append(tokens.data(), half));
  TERN_RETURN_IF_ERROR(w->Append(tokens.data() + half, tokens.size() - half));
  return w->Finish();
}

TEST(Shard, WriteReadTwoBytesPerToken) {
  TempDir dir;
  auto tokens = Ramp(700'001, 50257);
  ASSERT_TRUE(WriteShard(dir / "a.bin", 50257, tokens).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "a.bin.tmp"));
  std::string bytes = ReadFile(dir / "a.bin");
  ASSERT_EQ(bytes.size(), 64 + 2 * tokens.size());
  EXPECT_EQ(bytes.substr(0, 8), "TERNTOKS");
  uint32_t version, vocab, bpt;
  uint64_t count;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&vocab, bytes.data() + 12, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  std::memcpy(&bpt, bytes.data() + 24, 4);
  EXPECT_EQ(version, 1u);
  EXPECT_EQ(vocab, 50257u);
  EXPECT_EQ(count, tokens.size());
  EXPECT_EQ(bpt, 2u);
  EXPECT_EQ(bytes.substr(28, 4), std::string(4, '\0'));
  uint64_t content;  // XXH3-64 of the token bytes, by xxHash itself
  std::memcpy(&content, bytes.data() + 32, 8);
  EXPECT_EQ(content, XXH3_64bits(bytes.data() + 64, bytes.size() - 64));
  EXPECT_EQ(bytes.substr(40, 24), std::string(24, '\0'));

  auto r = ShardReader::Open(dir / "a.bin");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), tokens.size());
  EXPECT_EQ(r->vocab_size(), 50257u);
  for (size_t i = 0; i < tokens.size(); i += 997) EXPECT_EQ((*r)[i], static_cast<uint32_t>(tokens[i]));
  std::vector<int32_t> out(1000);
  ASSERT_TRUE(r->Read(12345, out.size(), out.data()).ok());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), tokens.begin() + 12345));
  EXPECT_FALSE(r->Read(tokens.size() - 10, 11, out.data()).ok());
  ShardReader moved = std::move(r).value();  // movable; the mapping follows
  EXPECT_EQ(moved.Get(tokens.size() - 1), static_cast<uint32_t>(tokens.back()));
}

// The header's content hash: the reader reports it without reading the tokens, VerifyContent reads them and
// names a file whose bytes changed; a shard written before the hash existed (zeros there) opens and verifies.
TEST(Shard, ContentHashFindsAChangedTokenAndOldShardsStillRead) {
  TempDir dir;
  const std::string path = dir / "a.bin";
  auto tokens = Ramp(100'003, 4096);
  ASSERT_TRUE(WriteShard(path, 4096, tokens).ok());
  {
    auto r = ShardReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    const std::string bytes = ReadFile(path);
    EXPECT_EQ(r->content_xxh3(), XXH3_64bits(bytes.data() + 64, bytes.size() - 64));
    EXPECT_TRUE(r->VerifyContent().ok());
  }
  std::string bytes = ReadFile(path);
  bytes[64 + 2 * 5000] ^= 1;  // token 5000 changes, the header does not
  WriteFile(path, bytes);
  {
    auto r = ShardReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Status st = r->VerifyContent();
    EXPECT_EQ(st.code(), Status::Code::kCorruption);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("tern prepare"), std::string::npos) << st.message();
  }
  std::memset(bytes.data() + 32, 0, 8);  // as an older tern wrote it
  WriteFile(path, bytes);
  auto r = ShardReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->content_xxh3(), 0u);
  EXPECT_TRUE(r->VerifyContent().ok());
  // The split's identity: order matters, masks count, an unrecorded shard gives none.
  const uint64_t a = 11, b = 22;
  EXPECT_NE(ShardsFingerprint(std::vector<uint64_t>{a, b}, {}),
            ShardsFingerprint(std::vector<uint64_t>{b, a}, {}));
  EXPECT_NE(ShardsFingerprint(std::vector<uint64_t>{a}, {}),
            ShardsFingerprint(std::vector<uint64_t>{a}, std::vector<uint64_t>{b}));
  EXPECT_EQ(ShardsFingerprint(std::vector<uint64_t>{a, 0}, {}), "");
  EXPECT_EQ(ShardsFingerprint(std::vector<uint64_t>{a}, {}).size(), 16u);
}

TEST(Shard, FourBytesPerTokenForLargeVocab) {
  TempDir dir;
  auto tokens = Ramp(10'000, 100'000);
  tokens.push_back(99'999);
  ASSERT_TRUE(WriteShard(dir / "big.bin", 100'000, tokens).ok());
  auto r = ShardReader::Open(dir / "big.bin");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->bytes_per_token(), 4u);
  std::vector<int32_t> out(tokens.size());
  ASSERT_TRUE(r->Read(0, out.size(), out.data()).ok());
  EXPECT_EQ(out, tokens);
  EXPECT_EQ(ShardBytesPerToken(65536), 2u);
  EXPECT_EQ(ShardBytesPerToken(65537), 4u);
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "e.bin", 300, {}).ok());
  auto r = ShardReader::Open(dir / "e.bin");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 0u);
}

TEST(Shard, WriterPublishesOnlyOnFinish) {
  TempDir dir;
  {
    auto w = ShardWriter::Create(dir / "s.bin", 1000);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(Ramp(100, 1000)).ok());
    EXPECT_FALSE(std::filesystem::exists(dir / "s.bin"));
    EXPECT_TRUE(std::filesystem::exists(dir / "s.bin.tmp"));
    int32_t bad = 1000;
    Status st = (*w)->Append(&bad, 1);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
    EXPECT_EQ((*w)->count(), 100u);
  }  // destroyed without Finish(): the temp file goes, nothing is published
  EXPECT_FALSE(std::filesystem::exists(dir / "s.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "s.bin.tmp"));
}

void ExpectCorruption(const std::string& path, const std::string& what) {
  auto r = ShardReader::Open(path);
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), Status::Code::kCorruption) << what << ": " << r.status().ToString();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << "the message must name the file";
}

TEST(Shard, CorruptFilesAreRejectedWithTheirName) {
  TempDir dir;
  ASSERT_TRUE(WriteShard(dir / "good.bin", 50257, Ramp(1000, 50257)).ok());
  std::string good = ReadFile(dir / "good.bin");

  WriteFile(dir / "truncated.bin", good.substr(0, good.size() - 3));
  ExpectCorruption(dir / "truncated.bin", "truncated");
  WriteFile(dir / "extra.bin", good + "xx");
  ExpectCorruption(dir / "extra.bin", "longer than the header says");
  std::string magic = good;
  magic[0] = 'X';
  WriteFile(dir / "magic.bin", magic);
  ExpectCorruption(dir / "magic.bin", "bad magic");
  std::string version = good;
  version[8] = 9;
  WriteFile(dir / "version.bin", version);
  ExpectCorruption(dir / "version.bin", "unknown version");
  WriteFile(dir / "short.bin", "TERNTOKS");
  ExpectCorruption(dir / "short.bin", "shorter than a header");

  auto missing = ShardReader::Open(dir / "missing.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
}

}  // namespace
}  // namespace tern
