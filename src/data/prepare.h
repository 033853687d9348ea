// tern prepare as a library call: raw text files -> tokenizer + train/val token shards + prepare.json.
//
// Output directory layout:
//   tokenizer.model, tokenizer.vocab   SentencePiece BPE (see tokenizer.h)
//   train_000.bin, train_001.bin, ...  token shards (see shard.h), a new one every shard_tokens tokens
//   val_000.bin, ...                   held-out shards (absent when val_fraction is 0 or the corpus is tiny)
//   prepare.json                       what was done: inputs, sizes, token counts, tokenizer fingerprint
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"

namespace tern {

struct PrepareOptions {
  std::vector<std::string> inputs;  // text files or directories (searched recursively)
  std::string out_dir;
  int vocab_size = 0;          // of the tokenizer trained here; with `tokenizer`, 0 or that tokenizer's size
  std::string tokenizer;       // an existing tokenizer.model to encode with instead of training one: data for
                               // fine-tuning a model keeps that model's tokenizer (docs/finetune.md)
  double val_fraction = 0.01;  // share of 64-line blocks held out for validation, in [0, 0.5]
  uint64_t shard_tokens = 100'000'000;
  uint64_t max_sentences = 2'000'000;  // lines sampled to train the tokenizer
  bool force = false;                  // replace an output prepared with different options
  // Inputs are JSON Lines of conversations ({"messages": [...]}, OpenAI's fine-tuning format), rendered with
  // tern's chat template, each followed by end-of-text; shards get loss masks (*.mask.bin) so that training
  // learns the assistant's replies only. Needs `tokenizer` (a chat fine-tune starts from a model).
  bool chat = false;
  int threads = 0;          // encoding threads; 0 = one per core
  FILE* progress = stderr;  // progress lines go here; nullptr = quiet
};

struct PrepareSummary {
  std::vector<std::string> files;  // the input files, in the order they were read
  uint64_t bytes = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> train_shards, val_shards;  // paths
  // Each split's content identity (data/shard.h ShardsFingerprint): prepare.json "content"; a training run
  // records the train split's in its checkpoints and refuses to resume on other tokens.
  std::string train_content, val_content;
  int vocab_size = 0;
  std::string tokenizer_path, fingerprint, summary_path;
  std::string tokenizer_from;  // the tokenizer.model reused (PrepareOptions::tokenizer); empty = trained here
  double tokenizer_seconds = 0, seconds = 0;
  double bytes_per_token = 0;
  std::vector<std::string> warnings;
  struct Chat {
    uint64_t conversations[2] = {0, 0};   // train, val
    uint64_t trained_tokens[2] = {0, 0};  // the tokens the loss learns (mask 1)
  } chat;                                 // PrepareOptions::chat
};

// Runs the whole pipeline. Inputs are checked before anything is written (missing, unreadable, binary and
// empty inputs fail with the file's name). Everything is written under a temp directory inside out_dir and
// moved into place only at the end, so a failed run leaves a previous output as it was.
Result<PrepareSummary> Prepare(const PrepareOptions& options);

// `tern prepare --verify DIR`: reads every shard (and loss mask) of a prepared dataset and checks it against
// its header's content hash, and the splits against prepare.json's token counts and content. Corruption names
// the first file that differs and says to re-run tern prepare. Shards written before tern recorded hashes are
// counted (unrecorded) and pass on their sizes.
struct VerifySummary {
  size_t shards = 0, unrecorded = 0;  // files read (token shards and masks); of them without a recorded hash
  uint64_t tokens[2] = {0, 0};        // train, val
  std::string content[2];             // each split's ShardsFingerprint ("" when unrecorded)
};
Result<VerifySummary> VerifyPrepared(const std::string& dir, FILE* progress = nullptr);

// Lines are grouped into blocks of kLinesPerBlock consecutive lines (counted across all files). Block 0 is
// always train, block 1 always val (when val_fraction > 0), so both splits are non-empty once there are two
// blocks; any other block is val when xxh3(block index) mod 10000 < val_fraction * 10000, which spreads val
// evenly through the corpus and does not depend on the number of threads or the shard size.
inline constexpr uint64_t kLinesPerBlock = 64;
bool IsValBlock(uint64_t block, double val_fraction);

// Expands inputs into the files to read: a file as given, a directory's regular files recursively in sorted
// order. Files under `skip_dir` (the output directory) are left out. NotFound names a missing input.
Result<std::vector<std::string>> CollectInputFiles(const std::vector<std::string>& inputs,
                                                   const std::string& skip_dir,
                                                   std::vector<std::string>* warnings);

}  // namespace tern
