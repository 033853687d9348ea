#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include "testing/files.h"

namespace tern {
namespace {

using testing::TempDir;
using testing::WriteFile;

// One tokenizer trained for the whole suite (training takes a fraction of a second, but only once).
class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    corpus_ = new std::string(testing::MakeCorpus(120 * 1000));
    WriteFile(*dir_ / "corpus.txt", *corpus_);
    Status st = Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "tok", 500);
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto t = Tokenizer::Load(*dir_ / "tok.model");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = new Tokenizer(std::move(t).value());
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete corpus_;
    delete dir_;
  }
  static TempDir* dir_;
  static std::string* corpus_;
  static Tokenizer* tok_;
};
TempDir* TokenizerTest::dir_ = nullptr;
std::string* TokenizerTest::corpus_ = nullptr;
Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, RoundTripIsLossless) {
  const std::vector<std::string> texts = {
      testing::kSampleText,
      *corpus_,
      "",
      "\n",
      "\n\n\n",
      "trailing newline\n",
      "  two leading spaces and two trailing  ",
      "\t\ttabs\tinside\t",
      "numbers 12345 67.89 -0",
      "unseen characters fall back to bytes: \xd0\x96\xd0\xb8\xd0\xb7\xd0\xbd\xd1\x8c \xf0\x9f\xa6\x80 "
      "\xe2\x82\xac",
      "crlf\r\nline\r\n",
      "multi\n  line\n\n\ttext\n \n",
  };
  for (const auto& t : texts) {
    std::vector<int32_t> ids = tok_->Encode(t);
    EXPECT_EQ(tok_->Decode(ids), t) << "text: " << t.substr(0, 80);
    EXPECT_EQ(tok_->Decode(ids.data(), ids.size()), t);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok_->vocab_size());
    }
  }
}

TEST_F(TokenizerTest, SpecialIdsAndCompression) {
  EXPECT_EQ(tok_->vocab_size(), 500);
  EXPECT_EQ(tok_->eos_id(), Tokenizer::kEosId);
  EXPECT_EQ(tok_->Encode("\n"), std::vector<int32_t>{tok_->newline_id()});
  EXPECT_EQ(tok_->Decode({tok_->eos_id()}), "");  // eos separates documents, it is not text
  std::vector<int32_t> ids = tok_->Encode(*corpus_);
  double bytes_per_token = static_cast<double>(corpus_->size()) / ids.size();
  EXPECT_GT(bytes_per_token, 2.0) << "BPE should merge common words";
  EXPECT_EQ(tok_->Encode("EncodeAppend").size(), [&] {
    std::vector<int32_t> v = {7};
    tok_->EncodeAppend("EncodeAppend", &v);
    return v.size() - 1;
  }());
}

TEST_F(TokenizerTest, FingerprintIdentifiesTheModel) {
  EXPECT_EQ(tok_->fingerprint().size(), 16u);
  auto again = Tokenizer::Load(*dir_ / "tok.model");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->fingerprint(), tok_->fingerprint());
  // Deterministic: the same corpus and settings give the same model, wherever it is written.
  ASSERT_TRUE(Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "sub/dir/tok", 500).ok());
  auto same = Tokenizer::Load(*dir_ / "sub/dir/tok.model");
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->fingerprint(), tok_->fingerprint());
  ASSERT_TRUE(Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "other", 520).ok());
  auto other = Tokenizer::Load(*dir_ / "other.model");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->fingerprint(), tok_->fingerprint());
  Tokenizer moved = std::move(other).value();  // movable
  EXPECT_EQ(moved.vocab_size(), 520);
}

TEST_F(TokenizerTest, VocabSizeErrorsNameTheUsableRange) {
  Status tiny = Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "tiny", 100);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.message().find("259"), std::string::npos) << tiny.message();

  Status small = Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "small", 270);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(small.message().find("the minimum is"), std::string::npos) << small.message();

  Status huge = Tokenizer::Train({*dir_ / "corpus.txt"}, *dir_ / "huge", 60000);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("too large"), std::string::npos) << huge.message();
}

TEST_F(TokenizerTest, LoadErrors) {
  auto missing = Tokenizer::Load(*dir_ / "nope.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.model"), std::string::npos);
  WriteFile(*dir_ / "garbage.model", "this is not a protobuf");
  auto garbage = Tokenizer::Load(*dir_ / "garbage.model");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("garbage.model"), std::string::npos);
}

TEST(TokenizerTrain, MissingInputIsAnError) {
  TempDir dir;
  Status st = Tokenizer::Train({dir / "missing.txt"}, dir / "tok", 500);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing.txt"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tern
