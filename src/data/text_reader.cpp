#include "data/text_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tern {

TextReader::TextReader(std::string path, FILE* f, size_t max_piece)
    : path_(std::move(path)), file_(f), max_piece_(max_piece) {
  // Room for a full piece plus the byte after it (to see whether a cut lands inside a character), and
  // large enough that fread calls stay cheap.
  buf_.resize(std::max<size_t>(1 << 20, 2 * max_piece + 2));
}

TextReader::~TextReader() {
  if (file_) std::fclose(file_);
}

Result<std::unique_ptr<TextReader>> TextReader::Open(const std::string& path, size_t max_piece_bytes) {
  if (max_piece_bytes < 16) return Status::InvalidArgument("TextReader: max_piece_bytes must be >= 16");
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    return Status::IoError(fmt::format("cannot open input {}: {} (check the path and its permissions)", path,
                                       std::strerror(errno)));
  }
  return std::unique_ptr<TextReader>(new TextReader(path, f, max_piece_bytes));
}

size_t TextReader::SafeCut() const {
  const char* p = buf_.data() + begin_;
  // Prefer cutting just before a space in the second half of the window: the next piece then starts with
  // " word", which SentencePiece tokenizes exactly as it would mid-line.
  for (size_t i = max_piece_; i > max_piece_ / 2; --i) {
    if (p[i] == ' ') return i;
  }
  // Otherwise cut at a character boundary (never inside a multi-byte UTF-8 sequence): back up over at most
  // three continuation bytes 10xxxxxx.
  size_t cut = max_piece_;
  for (int k = 0; k < 3 && cut > 1 && (static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80; ++k) --cut;
  return cut;
}

Result<bool> TextReader::Next(std::string_view* piece, bool* ends_line) {
  while (true) {
    size_t avail = end_ - begin_;
    size_t scan = std::min(avail, max_piece_ + 1);
    const char* start = buf_.data() + begin_;
    if (const void* nl = std::memchr(start, '\n', scan)) {
      size_t len = static_cast<const char*>(nl) - start;
      *piece = std::string_view(start, len);
      *ends_line = true;
      begin_ += len + 1;
      consumed_ += len + 1;
      return true;
    }
    if (avail > max_piece_) {  // an over-long line: hand out a bounded part of it
      size_t cut = SafeCut();
      *piece = std::string_view(start, cut);
      *ends_line = false;
      begin_ += cut;
      consumed_ += cut;
      return true;
    }
    if (eof_) {
      if (avail == 0) return false;
      *piece = std::string_view(start, avail);  // last line without a trailing '\n'
      *ends_line = false;
      begin_ = end_;
      consumed_ += avail;
      return true;
    }
    // Need more bytes: move the unread tail to the front and refill.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, avail);
      begin_ = 0;
      end_ = avail;
    }
    size_t n = std::fread(buf_.data() + end_, 1, buf_.size() - end_, file_);
    if (n == 0) {
      if (std::ferror(file_)) {
        return Status::IoError(fmt::format("error reading {}: {}", path_, std::strerror(errno)));
      }
      eof_ = true;
    }
    end_ += n;
  }
}

uint64_t CountInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  uint64_t bad = 0;
  while (i < n) {
    unsigned char c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || (len == 2 && c < 0xC2) ||
        (len == 4 && c > 0xF4)) {  // stray continuation / overlong / > U+10FFFF
      ++bad;
      ++i;
      continue;
    }
    if (i + len > n) {  // cut off by the end of the sample: not the file's fault
      bool prefix_ok = true;
      for (size_t k = i + 1; k < n; ++k) prefix_ok &= (p[k] & 0xC0) == 0x80;
      if (prefix_ok) break;
    }
    bool ok = i + len <= n;
    for (int k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len == 3) {  // overlong 3-byte forms and UTF-16 surrogates are invalid
      unsigned cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F);
      ok = cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF);
    }
    if (ok && len == 4) {
      unsigned cp = ((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12);
      ok = cp >= 0x10000 && cp <= 0x10FFFF;
    }
    if (!ok) {
      ++bad;
      ++i;
      continue;
    }
    i += len;
  }
  return bad;
}

Result<TextCheck> CheckTextFile(const std::string& path, size_t sample_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return Status::NotFound(fmt::format("input {} does not exist; check the path", path));
    return Status::IoError(fmt::format("cannot read input {}: {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(
        fmt::format("input {} is not a regular file (pass text files or directories)", path));
  }
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    return Status::IoError(fmt::format("cannot open input {}: {} (check its permissions, e.g. chmod a+r)",
                                       path, std::strerror(errno)));
  }
  std::string sample(sample_bytes, '\0');
  size_t n = std::fread(sample.data(), 1, sample.size(), f);
  bool err = std::ferror(f);
  int saved = errno;
  std::fclose(f);
  if (err) return Status::IoError(fmt::format("error reading input {}: {}", path, std::strerror(saved)));
  sample.resize(n);
  TextCheck check;
  check.size = static_cast<uint64_t>(st.st_size);
  check.sample_bytes = n;
  if (size_t nul = sample.find('\0'); nul != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "input {} looks binary (a NUL byte at offset {}); tern prepare reads UTF-8 text. Remove it from the "
        "inputs, or extract its text first (e.g. gunzip, pdftotext, or iconv -f UTF-16 -t UTF-8)",
        path, nul));
  }
  check.invalid_utf8_bytes = CountInvalidUtf8(sample);
  if (n > 0 && check.invalid_utf8_bytes * 10 > n * 3) {
    return Status::InvalidArgument(fmt::format(
        "input {} looks binary: {} of its first {} bytes are not valid UTF-8. tern prepare reads UTF-8 text; "
        "convert it first (e.g. iconv -f LATIN1 -t UTF-8 {} > {}.utf8.txt) or remove it from the inputs",
        path, check.invalid_utf8_bytes, n, path, path));
  }
  return check;
}

}  // namespace tern
