#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <xxhash.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include "core/file_util.h"
#include "core/progress.h"
#include "data/text_reader.h"

namespace tern {

static_assert(std::is_same_v<int, int32_t>, "SentencePiece ids are int; tern stores int32_t");

namespace {

// SentencePiece skips training lines longer than max_sentence_length (default 4192 bytes), which would drop
// most of a corpus that keeps a paragraph per line. We instead cut long lines into pieces below that limit
// (before a space, see TextReader), so the tokenizer still learns from all of the text. Encoding later has
// no length limit.
constexpr size_t kTrainPieceBytes = 4000;

// Feeds SentencePiece's trainer the pieces of every input file, streaming (never a whole file in memory).
class FileSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  FileSentenceIterator(const std::vector<std::string>& files, ProgressBar* bar) : files_(files), bar_(bar) {
    Advance();
  }
  bool done() const override { return done_; }
  void Next() override { Advance(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return status_; }
  const Status& tern_status() const { return tern_status_; }

 private:
  void Advance() {
    while (!done_) {
      if (!reader_) {
        if (next_file_ == files_.size()) {
          if (bar_) bar_->Finish("learning merges...");
          done_ = true;
          return;
        }
        auto r = TextReader::Open(files_[next_file_++], kTrainPieceBytes);
        if (!r.ok()) return Fail(r.status());
        reader_ = std::move(r).value();
      }
      std::string_view piece;
      bool ends_line;
      auto more = reader_->Next(&piece, &ends_line);
      if (!more.ok()) return Fail(more.status());
      if (!more.value()) {
        done_bytes_ += reader_->bytes_consumed();
        reader_.reset();
        continue;
      }
      if (bar_ && (++pieces_ & 1023) == 0) bar_->Update(done_bytes_ + reader_->bytes_consumed());
      if (piece.empty()) continue;  // blank lines teach nothing
      value_.assign(piece);
      return;
    }
  }
  void Fail(const Status& s) {
    tern_status_ = s;
    status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, s.message());
    done_ = true;
  }

  const std::vector<std::string>& files_;
  ProgressBar* bar_;
  uint64_t done_bytes_ = 0, pieces_ = 0;
  size_t next_file_ = 0;
  std::unique_ptr<TextReader> reader_;
  std::string value_;
  bool done_ = false;
  Status tern_status_;
  sentencepiece::util::Status status_;
};

// Turns SentencePiece's vocabulary-size failures into messages that say which --vocab-size would work.
Status ExplainTrainError(const std::string& msg, int vocab_size) {
  std::smatch m;
  static const std::regex kTooSmall(R"(smaller than required_chars\. (\d+) vs (\d+))");
  static const std::regex kTooLarge(
      R"(Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+))");
  if (std::regex_search(msg, m, kTooSmall)) {
    int need = std::stoi(m[2]);
    return Status::InvalidArgument(
        fmt::format("vocab size {} is too small for this corpus: the minimum is {} ({} byte pieces and "
                    "specials + {} distinct "
                    "characters). Use --vocab-size {} or more (a few thousand is typical)",
                    vocab_size, need, Tokenizer::kMinVocabSize, need - Tokenizer::kMinVocabSize, need));
  }
  if (std::regex_search(msg, m, kTooLarge)) {
    return Status::InvalidArgument(
        fmt::format("vocab size {} is too large for this corpus: its text only supports {} pieces. Use "
                    "--vocab-size {} or "
                    "less, or add more text",
                    vocab_size, m[2].str(), m[2].str()));
  }
  return Status::Internal("SentencePiece training failed: " + msg);
}

}  // namespace

Tokenizer::Tokenizer() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Status Tokenizer::Train(const std::vector<std::string>& input_files, const std::string& model_prefix,
                        int vocab_size, uint64_t max_sentences, FILE* progress) {
  if (input_files.empty()) return Status::InvalidArgument("tokenizer training needs at least one input file");
  if (vocab_size <= kMinVocabSize) {
    return Status::InvalidArgument(fmt::format(
        "vocab size {} is too small: tern's tokenizer needs {} pieces for the 256 bytes and unk/bos/eos plus "
        "one "
        "per distinct character of the corpus. Use --vocab-size 512 or more (a few thousand is typical)",
        vocab_size, kMinVocabSize));
  }
  if (max_sentences == 0) return Status::InvalidArgument("max_sentences must be > 0");
  // The settings that make the tokenizer lossless, each with its reason (src/data/README.md sums them up).
  std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", "bpe"},
      {"byte_fallback", "true"},                 // unseen characters become bytes, never <unk>
      {"normalization_rule_name", "identity"},   // no NFKC: text comes back as it went in
      {"remove_extra_whitespaces", "false"},     // keep runs of spaces and leading spaces
      {"add_dummy_prefix", "false"},             // do not invent a leading space
      {"split_digits", "true"},                  // numbers tokenize digit by digit
      {"allow_whitespace_only_pieces", "true"},  // indentation can become one piece
      {"character_coverage", "1.0"},
      {"max_sentence_length", std::to_string(kTrainPieceBytes + 192)},
      {"input_sentence_size", std::to_string(max_sentences)},  // reservoir sample: bounds memory
      {"shuffle_input_sentence", "true"},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      {"pad_id", std::to_string(kPadId)},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // SentencePiece logs every step to stderr otherwise
  };
  // Fixed seed: the sentence sample (and so the tokenizer) is the same on every run for the same corpus.
  sentencepiece::SetRandomGeneratorSeed(20240601);
  std::unique_ptr<ProgressBar> bar;
  if (progress) {
    uint64_t total = 0;
    for (const auto& f : input_files) {
      std::error_code ec;
      uint64_t n = std::filesystem::file_size(f, ec);
      total += ec ? 0 : n;
    }
    bar = std::make_unique<ProgressBar>("tokenizer", total, "B", progress);
  }
  FileSentenceIterator it(input_files, bar.get());
  // No model_prefix: SentencePiece hands back the serialized model and writes nothing itself. (With a prefix
  // it would also store that path inside the model, so the same tokenizer trained in another directory
  // would get another fingerprint.)
  std::string model;
  auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  if (!it.tern_status().ok()) return it.tern_status();
  if (!st.ok()) return ExplainTrainError(st.message(), vocab_size);

  // MODEL_PREFIX.vocab as spm_train writes it (piece TAB score), for people reading the vocabulary.
  sentencepiece::SentencePieceProcessor sp;
  if (auto lst = sp.LoadFromSerializedProto(model); !lst.ok()) {
    return Status::Internal(fmt::format("SentencePiece produced an unreadable model: {}", lst.message()));
  }
  std::ostringstream vocab;
  for (int i = 0; i < sp.GetPieceSize(); ++i) vocab << sp.IdToPiece(i) << '\t' << sp.GetScore(i) << '\n';
  std::string parent = std::filesystem::path(model_prefix).parent_path().string();
  if (!parent.empty()) TERN_RETURN_IF_ERROR(MakeDirs(parent));
  TERN_RETURN_IF_ERROR(WriteFileAtomic(model_prefix + ".model", model));
  return WriteFileAtomic(model_prefix + ".vocab", vocab.str());
}

Result<Tokenizer> Tokenizer::Load(const std::string& model_path) {
  auto bytes = ReadFileToString(model_path);
  if (!bytes.ok()) {
    return Status::NotFound(
        fmt::format("cannot read tokenizer {}: {} (tern prepare writes DIR/tokenizer.model)", model_path,
                    bytes.status().message()));
  }
  Tokenizer tok;
  auto st = tok.sp_->LoadFromSerializedProto(*bytes);
  if (!st.ok()) {
    return Status::Corruption(
        fmt::format("{} is not a SentencePiece model ({}); re-run tern prepare", model_path, st.message()));
  }
  tok.newline_id_ = tok.sp_->PieceToId("<0x0A>");
  if (tok.newline_id_ < 0 || !tok.sp_->IsByte(tok.newline_id_)) {
    return Status::InvalidArgument(
        fmt::format("tokenizer {} has no byte-fallback pieces, so it cannot encode text losslessly; train it "
                    "with tern prepare",
                    model_path));
  }
  tok.eos_id_ = tok.sp_->eos_id();
  if (tok.eos_id_ < 0) {
    return Status::InvalidArgument(
        fmt::format("tokenizer {} has no eos piece; train it with tern prepare", model_path));
  }
  tok.fingerprint_ = fmt::format("{:016x}", XXH3_64bits(bytes->data(), bytes->size()));
  return tok;
}

void Tokenizer::EncodeAppend(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<int> ids;
  size_t start = 0;
  while (true) {
    size_t nl = text.find('\n', start);
    std::string_view line =
        text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    if (!line.empty()) {
      // Encode fails only for an unloaded model, which Load rules out.
      sp_->Encode(line, &ids).IgnoreError();
      out->insert(out->end(), ids.begin(), ids.end());
    }
    if (nl == std::string_view::npos) break;
    out->push_back(newline_id_);
    start = nl + 1;
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  EncodeAppend(text, &out);
  return out;
}

std::string Tokenizer::Decode(const int32_t* ids, size_t n) const {
  std::vector<int> valid;
  valid.reserve(n);
  const int v = vocab_size();
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < v) valid.push_back(ids[i]);
  }
  std::string text;
  sp_->Decode(valid, &text).IgnoreError();
  return text;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  return Decode(ids.data(), ids.size());
}

int Tokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

}  // namespace tern
