#include "data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "testing/files.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

PrepareOptions Options(const std::vector<std::string>& inputs, const std::string& out) {
  PrepareOptions o;
  o.inputs = inputs;
  o.out_dir = out;
  o.vocab_size = 500;
  o.val_fraction = 0.1;
  o.shard_tokens = 8192;
  o.threads = 2;
  o.progress = nullptr;
  return o;
}

// Every file of a directory with its bytes: to prove that a failed run changed nothing.
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[e.path().string()] = ReadFile(e.path().string());
  }
  return files;
}

std::vector<int32_t> ReadAll(const std::vector<std::string>& shards) {
  std::vector<int32_t> all;
  for (const auto& path : shards) {
    auto r = ShardReader::Open(path);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    size_t old = all.size();
    all.resize(old + r->size());
    EXPECT_TRUE(r->Read(0, r->size(), all.data() + old).ok());
  }
  return all;
}

TEST(Prepare, ValBlocksAreSpreadAndDeterministic) {
  EXPECT_FALSE(IsValBlock(0, 0.5));
  EXPECT_TRUE(IsValBlock(1, 0.001));
  EXPECT_FALSE(IsValBlock(1, 0.0));
  int val = 0;
  for (uint64_t b = 0; b < 100000; ++b) val += IsValBlock(b, 0.1);
  EXPECT_NEAR(val / 100000.0, 0.1, 0.005);
}

TEST(Prepare, EndToEndOnFilesAndADirectory) {
  TempDir tmp;
  WriteFile(tmp / "a.txt", testing::MakeCorpus(60'000, 1));
  std::string b = testing::MakeCorpus(20'000, 2);
  WriteFile(tmp / "b.txt", b + "no newline at the end");
  WriteFile(tmp / "dir/c.txt", testing::MakeCorpus(15'000, 3));
  WriteFile(tmp / "dir/empty.txt", "");
  WriteFile(tmp / "dir/sub/d.txt", testing::MakeCorpus(10'000, 4));
  const std::string out = tmp / "out";
  auto r = Prepare(Options({tmp / "a.txt", tmp / "b.txt", tmp / "dir"}, out));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const PrepareSummary& s = *r;

  const std::vector<std::string> files = {tmp / "a.txt", tmp / "b.txt", tmp / "dir/c.txt",
                                          tmp / "dir/empty.txt", tmp / "dir/sub/d.txt"};
  EXPECT_EQ(s.files, files);
  EXPECT_EQ(s.vocab_size, 500);
  EXPECT_GT(s.train_shards.size(), 1u) << "8192-token shards should roll over";
  EXPECT_EQ(s.val_shards.size(), 1u);
  EXPECT_GT(s.val_tokens, 0u);
  EXPECT_GT(s.train_tokens, 5 * s.val_tokens);

  // Rebuild what each split must hold: lines in 64-line blocks counted across files, eos between files.
  std::string expect[2];
  uint64_t line = 0, bytes = 0;
  for (const auto& f : files) {
    std::string text = ReadFile(f);
    bytes += text.size();
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      size_t end = nl == std::string::npos ? text.size() : nl + 1;
      expect[IsValBlock(line++ / kLinesPerBlock, 0.1)] += text.substr(pos, end - pos);
      pos = end;
    }
  }
  EXPECT_EQ(s.bytes, bytes);
  auto tok = Tokenizer::Load(out + "/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->fingerprint(), s.fingerprint);
  std::vector<int32_t> train = ReadAll(s.train_shards), val = ReadAll(s.val_shards);
  EXPECT_EQ(train.size(), s.train_tokens);
  EXPECT_EQ(val.size(), s.val_tokens);
  EXPECT_EQ(tok->Decode(train), expect[0]);
  EXPECT_EQ(tok->Decode(val), expect[1]);
  size_t eos = std::count(train.begin(), train.end(), tok->eos_id()) +
               std::count(val.begin(), val.end(), tok->eos_id());
  EXPECT_EQ(eos, 3u) << "one eos between each pair of non-empty files";

  auto j = nlohmann::json::parse(ReadFile(out + "/prepare.json"));
  EXPECT_EQ(j["tokens"]["train"], s.train_tokens);
  EXPECT_EQ(j["tokens"]["val"], s.val_tokens);
  EXPECT_EQ(j["tokenizer"]["fingerprint"], s.fingerprint);
  EXPECT_EQ(j["vocab_size"], 500);
  EXPECT_EQ(j["files"].size(), files.size());
  for (const auto& e : fs::directory_iterator(out)) {
    std::string name = e.path().filename().string();
    EXPECT_FALSE(name.starts_with(".prepare-tmp") || name.ends_with(".tmp")) << "left behind: " << name;
  }

  auto shards = FindShards(out, "train");
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ(*shards, s.train_shards);
  auto dl = DataLoader::Open(*shards, 4, 32, 1, true);
  ASSERT_TRUE(dl.ok()) << dl.status().ToString();
  // The content identity: what prepare.json records is what the loader reads from the shard headers.
  EXPECT_EQ(j["content"]["train"], s.train_content);
  EXPECT_EQ(j["content"]["val"], s.val_content);
  EXPECT_EQ((*dl)->content_fingerprint(), s.train_content);
  EXPECT_EQ(s.train_content.size(), 16u);
  EXPECT_NE(s.train_content, s.val_content);
}

// `tern prepare --verify`: a freshly prepared directory passes with prepare.json's counts and content; a
// flipped byte, a shard swapped for another of the same size, and a lost shard are each named.
TEST(Prepare, VerifyReadsEveryShardAndNamesWhatChanged) {
  TempDir tmp;
  WriteFile(tmp / "a.txt", testing::MakeCorpus(120'000, 1));
  const std::string out = tmp / "out";
  auto r = Prepare(Options({tmp / "a.txt"}, out));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GE(r->train_shards.size(), 3u);
  auto v = VerifyPrepared(out);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->shards, r->train_shards.size() + r->val_shards.size());
  EXPECT_EQ(v->unrecorded, 0u);
  EXPECT_EQ(v->tokens[0], r->train_tokens);
  EXPECT_EQ(v->tokens[1], r->val_tokens);
  EXPECT_EQ(v->content[0], r->train_content);
  EXPECT_EQ(v->content[1], r->val_content);

  const std::string first = r->train_shards[0], second = r->train_shards[1];
  const std::string original = ReadFile(first);
  std::string flipped = original;
  flipped[100] ^= 4;
  WriteFile(first, flipped);
  v = VerifyPrepared(out);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find(first), std::string::npos) << v.status().message();

  // Two whole shards of the same size exchanged: each is intact, the split is not what was prepared.
  const std::string other = ReadFile(second);
  ASSERT_EQ(other.size(), original.size());
  WriteFile(first, other);
  WriteFile(second, original);
  v = VerifyPrepared(out);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("replaced or reordered"), std::string::npos) << v.status().message();
  EXPECT_NE(v.status().message().find(r->train_content), std::string::npos) << v.status().message();

  WriteFile(second, other);
  WriteFile(first, original);
  ASSERT_TRUE(VerifyPrepared(out).ok());
  fs::remove(r->train_shards.back());
  v = VerifyPrepared(out);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("prepare.json says"), std::string::npos) << v.status().message();

  // A prepare.json that is not one (a non-string format, a list) is an error, not an exception (a dataset
  // fetched from S3 reads it from the store).
  for (const char* bad : {R"({"format": 5})", R"([1, 2])", R"({"format": null})"}) {
    WriteFile(out + "/prepare.json", bad);
    v = VerifyPrepared(out);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.status().code(), Status::Code::kCorruption) << bad;
  }
}

void ExpectErrorNaming(const PrepareOptions& o, const std::string& name, const std::string& also = "") {
  auto r = Prepare(o);
  ASSERT_FALSE(r.ok()) << "expected an error naming " << name;
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  if (!also.empty()) {
    EXPECT_NE(r.status().message().find(also), std::string::npos) << r.status().message();
  }
}

TEST(Prepare, BadInputsFailWithTheFileName) {
  TempDir tmp;
  WriteFile(tmp / "good.txt", testing::MakeCorpus(5000));
  WriteFile(tmp / "empty.txt", "");
  WriteFile(tmp / "image.png", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  WriteFile(tmp / "mixed/ok.txt", "text\n");
  WriteFile(tmp / "mixed/zz.gz", std::string("\x1f\x8b\x08\0\0\0\0\0", 8));
  const std::string out = tmp / "out";

  ExpectErrorNaming(Options({tmp / "missing.txt"}, out), "missing.txt", "does not exist");
  ExpectErrorNaming(Options({tmp / "empty.txt"}, out), "empty.txt", "no text");
  ExpectErrorNaming(Options({tmp / "good.txt", tmp / "image.png"}, out), "image.png", "binary");
  ExpectErrorNaming(Options({tmp / "mixed"}, out), "zz.gz", "binary");
  PrepareOptions bad_vocab = Options({tmp / "good.txt"}, out);
  bad_vocab.vocab_size = 100;
  ExpectErrorNaming(bad_vocab, "--vocab-size");
  ASSERT_EQ(::mkfifo((tmp / "pipe").c_str(), 0644), 0);  // not a regular file: would block forever if read
  ExpectErrorNaming(Options({tmp / "pipe"}, out), "pipe", "neither a regular file");
  if (::geteuid() != 0) {  // root reads everything
    WriteFile(tmp / "secret.txt", "text\n");
    fs::permissions(tmp / "secret.txt", fs::perms::none);
    ExpectErrorNaming(Options({tmp / "secret.txt"}, out), "secret.txt");
  }
  EXPECT_FALSE(fs::exists(out)) << "checks run before anything is written";
}

TEST(Prepare, FailedOrRefusedRunLeavesTheOldOutputIntact) {
  TempDir tmp;
  WriteFile(tmp / "a.txt", testing::MakeCorpus(40'000, 5));
  const std::string out = tmp / "out";
  PrepareOptions o = Options({tmp / "a.txt"}, out);
  ASSERT_TRUE(Prepare(o).ok());
  auto before = Snapshot(out);
  ASSERT_GT(before.size(), 4u);

  // Different options without --force: refused.
  PrepareOptions other = o;
  other.vocab_size = 520;
  ExpectErrorNaming(other, "--force");
  EXPECT_EQ(Snapshot(out), before);

  // With --force but failing midway (the tokenizer cannot reach this vocab size on so little text).
  other.vocab_size = 60000;
  other.force = true;
  ExpectErrorNaming(other, "too large");
  EXPECT_EQ(Snapshot(out), before) << "a failed prepare must not touch the previous output";

  // The same options again: allowed, and reproduces the same bytes (deterministic).
  ASSERT_TRUE(Prepare(o).ok());
  auto again = Snapshot(out);
  for (auto& [path, bytes] : before) {
    if (!path.ends_with("prepare.json")) {
      EXPECT_EQ(again[path], bytes) << path;
    }
  }

  // --force with fewer, larger shards: stale shards of the old output are removed, other files are not,
  // and a staging directory left by a dead run is cleaned up.
  WriteFile(out + "/train_notes.bin", "mine");
  fs::create_directories(out + "/.prepare-tmp-999999999");
  other.vocab_size = 500;
  other.shard_tokens = 1 << 20;
  auto r = Prepare(other);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->train_shards.size(), 1u);
  auto shards = FindShards(out, "train");
  ASSERT_TRUE(shards.ok());
  EXPECT_EQ(shards->size(), 1u);
  EXPECT_FALSE(fs::exists(out + "/train_001.bin"));
  EXPECT_TRUE(fs::exists(out + "/train_notes.bin"));
  EXPECT_FALSE(fs::exists(out + "/.prepare-tmp-999999999"));
}

// --tokenizer: new text encoded with a trained model's tokenizer (data to fine-tune it on), copied beside the
// shards instead of training one; another tokenizer over the same output needs --force.
TEST(Prepare, ReusesAnExistingTokenizer) {
  TempDir tmp;
  WriteFile(tmp / "base.txt", testing::MakeCorpus(40'000, 5));
  WriteFile(tmp / "new.txt", testing::MakeCorpus(20'000, 6));
  auto base = Prepare(Options({tmp / "base.txt"}, tmp / "base"));
  ASSERT_TRUE(base.ok()) << base.status().ToString();

  PrepareOptions o = Options({tmp / "new.txt"}, tmp / "new");
  o.vocab_size = 0;
  o.tokenizer = tmp / "base/tokenizer.model";
  auto r = Prepare(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fingerprint, base->fingerprint);
  EXPECT_EQ(r->vocab_size, 500);
  EXPECT_EQ(ReadFile(tmp / "new/tokenizer.model"), ReadFile(tmp / "base/tokenizer.model"));
  EXPECT_EQ(ReadFile(tmp / "new/tokenizer.vocab"), ReadFile(tmp / "base/tokenizer.vocab"));
  auto tok = Tokenizer::Load(tmp / "base/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(ReadAll(r->train_shards).size() + ReadAll(r->val_shards).size(),
            tok->Encode(ReadFile(tmp / "new.txt")).size())
      << "every line encoded with the reused tokenizer";
  auto j = nlohmann::json::parse(ReadFile(tmp / "new/prepare.json"));
  EXPECT_EQ(j["tokenizer"]["from"], fs::absolute(o.tokenizer).lexically_normal().string());
  EXPECT_EQ(j["options"]["tokenizer"], base->fingerprint);

  // A --vocab-size that is not the tokenizer's is an error naming both.
  PrepareOptions bad = o;
  bad.vocab_size = 600;
  ExpectErrorNaming(bad, "--vocab-size 600", "(500)");

  // The same output with another tokenizer: refused without --force (the data would change meaning).
  auto before = Snapshot(tmp / "new");
  PrepareOptions other = o;
  other.tokenizer = "";
  other.vocab_size = 400;
  ExpectErrorNaming(other, "--force");
  EXPECT_EQ(Snapshot(tmp / "new"), before);
  // A reused tokenizer with no .vocab beside it replaces the output's stale one rather than leaving it.
  fs::create_directories(tmp / "bare");
  fs::copy_file(tmp / "base/tokenizer.model", tmp / "bare/tokenizer.model");
  PrepareOptions bare = o;
  bare.tokenizer = tmp / "bare/tokenizer.model";
  bare.force = true;
  ASSERT_TRUE(Prepare(bare).ok());
  EXPECT_FALSE(fs::exists(tmp / "new/tokenizer.vocab"));
}

}  // namespace
}  // namespace tern
