// Helpers shared by the data tests: a temp directory that cleans itself up and a small, real-text corpus.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <gtest/gtest.h>

namespace tern::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tern_data_test_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& contents) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << contents;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Public-domain prose (KJV Genesis 1, the Gettysburg Address) plus lines with the awkward cases: tabs, runs
// of spaces, leading spaces, digits, accents, CJK, emoji, CRLF, empty lines.
inline const char* kSampleText =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "And the Spirit of God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n"
    "And God called the light Day, and the darkness he called Night.\n"
    "And the evening and the morning were the first day.\n"
    "\n"
    "Four score and seven years ago our fathers brought forth on this continent, a new nation,\n"
    "conceived in Liberty, and dedicated to the proposition that all men are created equal.\n"
    "Now we are engaged in a great civil war, testing whether that nation, or any nation so\n"
    "conceived and so dedicated, can long endure.\n"
    "\n"
    "    indented line\twith a tab\t\tand two,   three   spaces   \n"
    "\tdigits 0123456789 and 3.14159, 1,000,000; 2024-06-01T12:34:56Z\n"
    "caf\xc3\xa9 na\xc3\xafve \xc3\x86r\xc3\xb8sk\xc3\xb8"
    "bing \xce\xa9\xe2\x89\x88\xc3\xa7\xe2\x88\x9a "
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82\xf0\x9f\x9a\x80 end\n"
    "windows line ending\r\n"
    "   \n";

// About `bytes` of text: the sample above with numbered, shuffled variations so that it is not one
// repeated block (repetition alone caps the vocabulary SentencePiece can learn).
inline std::string MakeCorpus(size_t bytes, uint64_t seed = 1) {
  static const char* kWords[] = {"light",   "darkness", "waters",  "firmament", "nation",  "liberty",
                                 "earth",   "seed",     "fruit",   "tree",      "grass",   "heaven",
                                 "evening", "morning",  "created", "dedicated", "fathers", "war",
                                 "field",   "people",   "great",   "brought",   "forth",   "years"};
  std::mt19937_64 rng(seed);
  std::string out;
  while (out.size() < bytes) {
    out += kSampleText;
    for (int line = 0; line < 40; ++line) {
      out += "Verse " + std::to_string(rng() % 1000) + ":";
      int n = 4 + static_cast<int>(rng() % 12);
      for (int w = 0; w < n; ++w) out += std::string(" ") + kWords[rng() % std::size(kWords)];
      out += (rng() % 5 == 0) ? ";  and so on.\n" : ".\n";
    }
  }
  return out;
}

}  // namespace tern::testing
