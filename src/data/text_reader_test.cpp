#include "data/text_reader.h"

#include <gtest/gtest.h>

#include "testing/files.h"

namespace tern {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Reassembles the file from the reader's pieces, checking the bound on every piece.
std::string Reassemble(const std::string& path, size_t max_piece, size_t* pieces = nullptr) {
  auto r = TextReader::Open(path, max_piece);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::string out;
  std::string_view piece;
  bool ends_line;
  size_t n = 0;
  while (true) {
    auto more = (*r)->Next(&piece, &ends_line);
    EXPECT_TRUE(more.ok());
    if (!more.value()) break;
    EXPECT_LE(piece.size(), max_piece);
    EXPECT_EQ(CountInvalidUtf8(piece), 0u) << "a piece was cut inside a character";
    out.append(piece);
    if (ends_line) out.push_back('\n');
    ++n;
  }
  EXPECT_EQ((*r)->bytes_consumed(), out.size());
  if (pieces) *pieces = n;
  return out;
}

TEST(TextReader, PiecesRestoreTheFileExactly) {
  TempDir dir;
  std::string text = std::string(testing::kSampleText) + "\n\n";
  std::string long_line;
  while (long_line.size() < 5000)
    long_line += "word \xe6\x97\xa5\xe6\x9c\xac ";  // spaces and 3-byte characters
  std::string no_spaces;
  while (no_spaces.size() < 3000) no_spaces += "\xf0\x9f\x99\x82";  // 4-byte emoji only: cut at boundaries
  text += long_line + "\n" + no_spaces + "\nlast line without newline";
  WriteFile(dir / "t.txt", text);
  size_t pieces = 0;
  EXPECT_EQ(Reassemble(dir / "t.txt", 64, &pieces), text);
  EXPECT_GT(pieces, 100u);
  EXPECT_EQ(Reassemble(dir / "t.txt", 1 << 16), text);
}

TEST(TextReader, EmptyFileAndMissingFile) {
  TempDir dir;
  WriteFile(dir / "empty.txt", "");
  EXPECT_EQ(Reassemble(dir / "empty.txt", 64), "");
  auto r = TextReader::Open(dir / "nope.txt", 64);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nope.txt"), std::string::npos);
}

TEST(TextReader, CountInvalidUtf8) {
  EXPECT_EQ(CountInvalidUtf8("plain ascii"), 0u);
  EXPECT_EQ(CountInvalidUtf8("caf\xc3\xa9 \xf0\x9f\x99\x82"), 0u);
  EXPECT_EQ(CountInvalidUtf8("\xff\xfe"), 2u);
  EXPECT_EQ(CountInvalidUtf8("a\x80z"), 1u);        // stray continuation byte
  EXPECT_EQ(CountInvalidUtf8("\xc0\xaf"), 2u);      // overlong encoding
  EXPECT_EQ(CountInvalidUtf8("\xed\xa0\x80"), 3u);  // UTF-16 surrogate: every byte is invalid
  EXPECT_EQ(CountInvalidUtf8("ok \xe6\x97"), 0u);   // cut off by the end of the sample: not counted
}

TEST(TextReader, CheckTextFileRejectsBinary) {
  TempDir dir;
  WriteFile(dir / "text.txt", testing::kSampleText);
  auto ok = CheckTextFile(dir / "text.txt");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->invalid_utf8_bytes, 0u);

  WriteFile(dir / "nul.bin", std::string("abc\0def", 7));
  auto nul = CheckTextFile(dir / "nul.bin");
  ASSERT_FALSE(nul.ok());
  EXPECT_NE(nul.status().message().find("nul.bin"), std::string::npos);
  EXPECT_NE(nul.status().message().find("binary"), std::string::npos);

  std::string noise;
  for (int i = 0; i < 4096; ++i) noise.push_back(static_cast<char>(0x80 + (i * 37) % 128));
  WriteFile(dir / "noise.dat", noise);
  auto bad = CheckTextFile(dir / "noise.dat");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("noise.dat"), std::string::npos);
  EXPECT_NE(bad.status().message().find("iconv"), std::string::npos);

  auto missing = CheckTextFile(dir / "missing.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("missing.txt"), std::string::npos);
}

}  // namespace
}  // namespace tern
