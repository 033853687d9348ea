// tern prepare --chat: conversations into shards with loss masks. The tokens learned are exactly the
// replies and the end-of-text after each conversation; the loader turns every other target into -1; bad
// lines and a missing tokenizer are refused before anything is written.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "data/chat.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "testing/files.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::WriteFile;

class PrepareChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(tmp_ / "base.txt", testing::MakeCorpus(40'000));
    PrepareOptions o;
    o.inputs = {tmp_ / "base.txt"};
    o.out_dir = tmp_ / "base";
    o.vocab_size = 400;
    o.progress = nullptr;
    auto base = Prepare(o);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    std::string lines;
    for (int i = 0; i < 40; i++)
      lines +=
          R"({"messages": [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Verse )" +
          std::to_string(i) + R"(: light?"}, {"role": "assistant", "content": "waters and firmament"}]})" +
          "\n" + (i % 10 == 0 ? "\n" : "");
    WriteFile(tmp_ / "chats.jsonl", lines);
  }
  PrepareOptions Chat() {
    PrepareOptions o;
    o.inputs = {tmp_ / "chats.jsonl"};
    o.out_dir = tmp_ / "chat";
    o.tokenizer = tmp_ / "base/tokenizer.model";
    o.chat = true;
    o.val_fraction = 0.1;
    o.progress = nullptr;
    return o;
  }
  TempDir tmp_;
};

TEST_F(PrepareChatTest, MasksLearnTheRepliesAndTheLoaderIgnoresTheRest) {
  auto r = Prepare(Chat());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chat.conversations[0] + r->chat.conversations[1], 40u);
  EXPECT_GE(r->chat.conversations[1], 1u);
  auto tok = Tokenizer::Load(tmp_ / "chat/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  // Every conversation learns the tokens of " waters and firmament\n" and its end-of-text.
  const size_t reply = tok->Encode(" waters and firmament\n").size();
  EXPECT_EQ(r->chat.trained_tokens[0], r->chat.conversations[0] * (reply + 1));
  const auto summary = nlohmann::json::parse(testing::ReadFile(tmp_ / "chat/prepare.json"));
  EXPECT_EQ(summary["chat"]["conversations"]["train"], r->chat.conversations[0]);
  EXPECT_EQ(summary["options"]["chat"], true);

  // The learned tokens decode to the replies (and end-of-text), the others to the prompts.
  auto shard = ShardReader::Open(tmp_ / "chat/train_000.bin");
  auto mask = ShardReader::Open(MaskPathFor(tmp_ / "chat/train_000.bin"));
  ASSERT_TRUE(shard.ok() && mask.ok());
  ASSERT_EQ(shard->size(), mask->size());
  std::vector<int32_t> ids(shard->size()), m(shard->size()), learned, read;
  ASSERT_TRUE(shard->Read(0, ids.size(), ids.data()).ok());
  ASSERT_TRUE(mask->Read(0, m.size(), m.data()).ok());
  for (size_t i = 0; i < ids.size(); i++) (m[i] ? learned : read).push_back(ids[i]);
  std::string replies;
  for (uint64_t i = 0; i < r->chat.conversations[0]; i++) replies += " waters and firmament\n";
  EXPECT_EQ(tok->Decode(learned), replies) << "end-of-text decodes to nothing";
  EXPECT_EQ(std::count(learned.begin(), learned.end(), tok->eos_id()),
            static_cast<long>(r->chat.conversations[0]));
  EXPECT_NE(tok->Decode(read).find("Answer.\n\nUser: Verse 0: light?\nAssistant:"), std::string::npos);

  // The loader: a target is -1 exactly where the mask says the token is only read.
  const int T = 16;
  auto dl = DataLoader::Open({tmp_ / "chat/train_000.bin"}, 1, T, 1, /*shuffle=*/false);
  ASSERT_TRUE(dl.ok());
  EXPECT_TRUE((*dl)->has_masks());
  Batch b;
  for (uint64_t w = 0; w < (*dl)->windows_per_epoch(); w++) {
    ASSERT_TRUE((*dl)->Next(&b).ok());
    for (int t = 0; t < T; t++) {
      const size_t at = w * T + t + 1;
      ASSERT_EQ(b.targets[t], m[at] ? ids[at] : -1) << "window " << w << " position " << t;
    }
  }
  auto plain = DataLoader::Open({tmp_ / "base/train_000.bin"}, 1, T, 1, false);
  EXPECT_FALSE((*plain)->has_masks());
}

TEST_F(PrepareChatTest, BadLinesAndAMissingTokenizerAreRefusedBeforeAnythingIsWritten) {
  PrepareOptions o = Chat();
  o.tokenizer.clear();
  auto none = Prepare(o);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--tokenizer"), std::string::npos);
  WriteFile(tmp_ / "bad.jsonl", std::string(R"({"messages": [{"role": "user", "content": "a"}, )") +
                                    R"({"role": "assistant", "content": "b"}]})" + "\n" +
                                    R"({"messages": [{"role": "user", "content": "only a question"}]})" +
                                    "\n");
  o = Chat();
  o.inputs = {tmp_ / "bad.jsonl"};
  auto bad = Prepare(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.jsonl:2: no assistant message"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(fs::exists(tmp_ / "chat/prepare.json"));
}

}  // namespace
}  // namespace tern
