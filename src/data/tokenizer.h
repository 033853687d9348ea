// A lossless byte-level BPE tokenizer: SentencePiece BPE with byte fallback and no normalization, so that
// Decode(Encode(text)) == text for any valid UTF-8 text (newlines, tabs, runs of spaces, digits, emoji).
//
// Fixed special ids (the same for every model tern trains):
//   0 = <unk> (never produced: byte fallback covers every byte), 1 = <s> (bos), 2 = </s> (eos, written
//   between documents by tern prepare), no pad piece. Ids 3..258 are the 256 byte pieces <0x00>..<0xFF>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tern {

class Tokenizer {
 public:
  static constexpr int kUnkId = 0, kBosId = 1, kEosId = 2, kPadId = -1;
  // 256 byte pieces + unk/bos/eos. A corpus also needs one piece per distinct character it contains.
  static constexpr int kMinVocabSize = 259;

  // Trains on the text of `input_files` and writes MODEL_PREFIX.model and MODEL_PREFIX.vocab.
  // At most `max_sentences` lines are used (a uniform sample when the corpus has more), which bounds the
  // memory and time of training on huge corpora. Fails with the usable range when vocab_size does not fit
  // the corpus (too small for its characters, or more pieces than its text can produce). With `progress`,
  // a progress line shows the pass over the text (the merge phase after it has no progress to report).
  static Status Train(const std::vector<std::string>& input_files, const std::string& model_prefix,
                      int vocab_size, uint64_t max_sentences = 2'000'000, FILE* progress = nullptr);

  static Result<Tokenizer> Load(const std::string& model_path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text -> ids. Multi-line text is encoded line by line (SentencePiece is line oriented) with the byte
  // piece <0x0A> between lines, so the newlines survive the round trip.
  std::vector<int32_t> Encode(std::string_view text) const;
  // Appends to *out instead of returning a new vector.
  void EncodeAppend(std::string_view text, std::vector<int32_t>* out) const;
  // Ids -> text. Control ids (bos/eos) decode to nothing; ids out of range decode to nothing.
  std::string Decode(const std::vector<int32_t>& ids) const;
  std::string Decode(const int32_t* ids, size_t n) const;

  int vocab_size() const;
  int eos_id() const { return eos_id_; }
  int newline_id() const { return newline_id_; }
  // xxh3-64 of the model file's bytes, 16 hex digits: identifies the tokenizer (checkpoints record it).
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  Tokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int eos_id_ = kEosId;
  int newline_id_ = -1;
  std::string fingerprint_;
};

}  // namespace tern
