// Streams a text file in bounded pieces so that no input, however large or however long its lines, is ever
// held in memory whole. Used by tokenizer training (pieces become SentencePiece "sentences") and by prepare
// (pieces are encoded and written to shards).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern {

class TextReader {
 public:
  // max_piece_bytes bounds every piece Next() returns; it must be >= 16.
  static Result<std::unique_ptr<TextReader>> Open(const std::string& path, size_t max_piece_bytes);
  ~TextReader();

  // Yields the next piece of the file: a whole line without its '\n' (then *ends_line = true), or, for a line
  // longer than max_piece_bytes, a part of it cut before a space or at a UTF-8 character boundary (then
  // *ends_line = false and the line continues in the next piece). Concatenating the pieces, with '\n' after
  // those that end a line, restores the file byte for byte. The view is valid until the next call.
  // Returns false at the end of the file.
  Result<bool> Next(std::string_view* piece, bool* ends_line);

  uint64_t bytes_consumed() const { return consumed_; }  // file bytes covered by the pieces returned so far
  const std::string& path() const { return path_; }

 private:
  TextReader(std::string path, FILE* f, size_t max_piece);
  size_t SafeCut() const;  // where to cut a piece of an over-long line, relative to begin_

  std::string path_;
  FILE* file_;
  size_t max_piece_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // unread bytes are buf_[begin_, end_)
  bool eof_ = false;
  uint64_t consumed_ = 0;
};

// Result of sniffing the start of a file.
struct TextCheck {
  uint64_t size = 0;
  uint64_t invalid_utf8_bytes = 0;  // within the sample
  uint64_t sample_bytes = 0;
};

// Checks that `path` is a readable regular file holding text: reads its first `sample_bytes` and fails with a
// message naming the file when it is unreadable or looks binary (a NUL byte, or more than 30% of the bytes
// not valid UTF-8). A few invalid bytes pass (they are counted; SentencePiece maps them to U+FFFD).
Result<TextCheck> CheckTextFile(const std::string& path, size_t sample_bytes = 64 * 1024);

// Number of bytes in s that are not part of a valid UTF-8 sequence. A sequence cut off by the end of s is
// not counted (the sample may end mid-character).
uint64_t CountInvalidUtf8(std::string_view s);

}  // namespace tern
