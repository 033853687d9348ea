#include "data/prepare.h"

#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "core/progress.h"
#include "data/prepare_chat.h"
#include "data/shard.h"
#include "data/split_writer.h"
#include "data/text_reader.h"
#include "data/tokenizer.h"

namespace tern {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kPieceBytes = 16 * 1024;    // TextReader piece bound
constexpr size_t kSegmentBytes = 64 * 1024;  // text encoded in one Encode call (at most)
constexpr size_t kJobBytes = 1 << 20;        // text handed to one encoding task
constexpr const char* kStagingPrefix = ".prepare-tmp-";

// A run of text from one split, encoded in one call; eos_after marks the end of an input file.
struct Segment {
  int split;  // 0 = train, 1 = val
  std::string text;
  bool eos_after = false;
};
struct EncodedSegment {
  int split;
  std::vector<int32_t> ids;
};

// train_NNN.bin / val_NNN.bin (and their .mask.bin) exactly: publishing deletes old shards, and nothing else
// of the user's.
bool IsShardName(const std::string& name) {
  for (std::string split : {"train_", "val_"}) {
    if (!name.starts_with(split) || !name.ends_with(".bin")) continue;
    std::string digits = name.substr(split.size(), name.size() - split.size() - 4);
    if (digits.ends_with(".mask")) digits.resize(digits.size() - 5);
    if (digits.size() >= 3 &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

// Staging directories of runs that died (their process is gone) would otherwise stay forever.
void RemoveStaleStaging(const std::string& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    std::string name = e.path().filename().string();
    if (!name.starts_with(kStagingPrefix)) continue;
    pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + std::strlen(kStagingPrefix)));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(e.path(), ec);
  }
}

// Removes the staging directory on every way out of Prepare.
struct StagingGuard {
  std::string dir;
  ~StagingGuard() {
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

Status CheckOptions(const PrepareOptions& o) {
  if (o.inputs.empty()) return Status::InvalidArgument("no inputs: pass --input FILE_OR_DIR (one or more)");
  if (o.out_dir.empty()) return Status::InvalidArgument("no output directory: pass --out DIR");
  if (o.chat && o.tokenizer.empty())
    return Status::InvalidArgument(
        "--chat fine-tunes a trained model: give its tokenizer, --tokenizer RUN_DIR (or models:/NAME@REF); "
        "docs/finetune.md");
  if (!o.tokenizer.empty()) {
    if (o.vocab_size < 0)
      return Status::InvalidArgument("--vocab-size must be positive (or 0 with --tokenizer)");
  } else if (o.vocab_size <= Tokenizer::kMinVocabSize || o.vocab_size > (1 << 20)) {
    return Status::InvalidArgument(
        fmt::format("--vocab-size {} is out of range: use {}..{} (a few thousand is typical "
                    "for a small corpus; GPT-2 uses 50257)",
                    o.vocab_size, Tokenizer::kMinVocabSize + 1, 1 << 20));
  }
  if (!(o.val_fraction >= 0 && o.val_fraction <= 0.5)) {
    return Status::InvalidArgument(
        fmt::format("--val-fraction {} is out of range: use 0 (no validation split) .. 0.5", o.val_fraction));
  }
  if (o.shard_tokens < 1024) return Status::InvalidArgument("--shard-tokens must be at least 1024");
  if (o.max_sentences == 0) return Status::InvalidArgument("--max-sentences must be at least 1");
  return Status::Ok();
}

// The options that define a prepared dataset: a rerun with the same ones may replace it without --force.
json OptionsJson(const PrepareOptions& o, const std::string& fingerprint) {
  json inputs = json::array();
  for (const auto& in : o.inputs) inputs.push_back(fs::absolute(in).lexically_normal().string());
  json j = {{"inputs", inputs},
            {"vocab_size", o.vocab_size},
            {"val_fraction", o.val_fraction},
            {"shard_tokens", o.shard_tokens},
            {"max_sentences", o.max_sentences}};
  if (o.chat) j["chat"] = true;
  if (!fingerprint.empty()) j["tokenizer"] = fingerprint;  // a reused tokenizer is part of what the data is
  return j;
}

Status CheckExistingOutput(const PrepareOptions& o, const std::string& fingerprint) {
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_directory(o.out_dir, ec)) {
    return Status::InvalidArgument(fmt::format("--out {} exists and is not a directory", o.out_dir));
  }
  const std::string summary = o.out_dir + "/prepare.json";
  if (o.force || !fs::exists(summary, ec)) return Status::Ok();
  auto text = ReadFileToString(summary);
  json old = text.ok() ? json::parse(*text, nullptr, /*allow_exceptions=*/false) : json();
  if (old.is_object() && old.contains("options") && old["options"] == OptionsJson(o, fingerprint))
    return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{} already holds data prepared with different options (see {}); pass --force to replace it, or choose "
      "another --out",
      o.out_dir, summary));
}

// Reads every file, cuts it into segments by split, encodes them on worker threads and appends the ids to the
// shards in input order. Never holds more than a few MB of text per thread.
Status EncodeCorpus(const PrepareOptions& o, const std::vector<std::string>& files,
                    const std::vector<uint64_t>& sizes, uint64_t total_bytes, const Tokenizer& tok,
                    SplitWriter* train, SplitWriter* val) {
  SplitWriter* writers[2] = {train, val};
  size_t threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<ProgressBar> bar;
  if (o.progress) bar = std::make_unique<ProgressBar>("encode", total_bytes, "B", o.progress);

  std::deque<std::pair<std::future<std::vector<EncodedSegment>>, uint64_t>> inflight;
  auto drain_one = [&]() -> Status {
    std::vector<EncodedSegment> done = inflight.front().first.get();
    uint64_t bytes_after = inflight.front().second;
    inflight.pop_front();
    for (const auto& seg : done)
      TERN_RETURN_IF_ERROR(writers[seg.split]->Append(seg.ids.data(), seg.ids.size()));
    if (bar)
      bar->Update(bytes_after, ProgressBar::FormatAmount(double(train->total() + val->total()), "tokens"));
    return Status::Ok();
  };
  std::vector<Segment> job;
  size_t job_bytes = 0;
  auto submit = [&](uint64_t bytes_after) -> Status {
    if (job.empty()) return Status::Ok();
    inflight.emplace_back(std::async(std::launch::async,
                                     [&tok, segs = std::move(job)]() {
                                       std::vector<EncodedSegment> out;
                                       for (const auto& s : segs) {
                                         out.push_back({s.split, tok.Encode(s.text)});
                                         if (s.eos_after) out.back().ids.push_back(tok.eos_id());
                                       }
                                       return out;
                                     }),
                          bytes_after);
    job.clear();
    job_bytes = 0;
    while (inflight.size() >= 2 * threads) TERN_RETURN_IF_ERROR(drain_one());
    return Status::Ok();
  };

  size_t last_nonempty = 0;
  for (size_t i = 0; i < files.size(); ++i)
    if (sizes[i] > 0) last_nonempty = i;
  uint64_t line = 0, bytes_before = 0;
  for (size_t fi = 0; fi < files.size(); bytes_before += sizes[fi], ++fi) {
    if (sizes[fi] == 0) continue;
    TERN_ASSIGN_OR_RETURN(auto reader, TextReader::Open(files[fi], kPieceBytes));
    std::string text;
    int split = 0;
    bool mid_line = false;
    auto flush = [&](bool eos) {
      if (text.empty() && !eos) return;
      job_bytes += text.size();
      job.push_back({split, std::move(text), eos});
      text.clear();
    };
    std::string_view piece;
    bool ends_line = false;
    while (true) {
      TERN_ASSIGN_OR_RETURN(bool more, reader->Next(&piece, &ends_line));
      if (!more) break;
      int s = IsValBlock(line / kLinesPerBlock, o.val_fraction) ? 1 : 0;
      if (s != split) flush(false);
      split = s;
      text.append(piece);
      mid_line = !ends_line;
      if (ends_line) {
        text.push_back('\n');
        if (++line % kLinesPerBlock == 0) flush(false);
      }
      if (text.size() >= kSegmentBytes) flush(false);
      if (job_bytes >= kJobBytes) TERN_RETURN_IF_ERROR(submit(bytes_before + reader->bytes_consumed()));
    }
    if (mid_line) ++line;                // a last line without '\n' still counts as a line
    flush(/*eos=*/fi != last_nonempty);  // eos separates documents
    TERN_RETURN_IF_ERROR(submit(bytes_before + sizes[fi]));
  }
  while (!inflight.empty()) TERN_RETURN_IF_ERROR(drain_one());
  if (bar) bar->Finish(ProgressBar::FormatAmount(double(train->total() + val->total()), "tokens"));
  TERN_RETURN_IF_ERROR(train->Close());
  return val->Close();
}

// Moves the staged files into out_dir. prepare.json is removed first and written last, so an interrupted
// publish leaves a directory without prepare.json (visibly incomplete) rather than a mix that claims to be
// whole.
Status Publish(const std::string& staging, const std::string& out, const std::vector<std::string>& names) {
  std::error_code ec;
  fs::remove(out + "/prepare.json", ec);
  std::set<std::string> keep(names.begin(), names.end());
  // shards of the old output that the new one lacks, and its tokenizer.vocab when a reused tokenizer came
  // without one
  for (const auto& e : fs::directory_iterator(out, ec)) {
    std::string name = e.path().filename().string();
    if ((IsShardName(name) || name == "tokenizer.vocab") && !keep.count(name)) fs::remove(e.path(), ec);
  }
  for (const auto& name : names) {
    fs::rename(staging + "/" + name, out + "/" + name, ec);
    if (ec) return Status::IoError(fmt::format("cannot move {} into {}: {}", name, out, ec.message()));
  }
  fs::rename(staging + "/prepare.json", out + "/prepare.json", ec);
  if (ec) return Status::IoError(fmt::format("cannot move prepare.json into {}: {}", out, ec.message()));
  return SyncParentDir(out + "/prepare.json");
}

// Copies a reused tokenizer.model (and the tokenizer.vocab beside it, when there is one) into the staging
// directory, adding what it copied to *names.
Status CopyTokenizer(const std::string& model, const std::string& staging, std::vector<std::string>* names) {
  std::error_code ec;
  fs::copy_file(model, staging + "/tokenizer.model", fs::copy_options::overwrite_existing, ec);
  if (ec) return Status::IoError(fmt::format("copying --tokenizer {}: {}", model, ec.message()));
  const fs::path vocab = fs::path(model).replace_extension(".vocab");
  if (fs::exists(vocab, ec)) {
    fs::copy_file(vocab, staging + "/tokenizer.vocab", fs::copy_options::overwrite_existing, ec);
    if (ec) return Status::IoError(fmt::format("copying {}: {}", vocab.string(), ec.message()));
    names->push_back("tokenizer.vocab");
  }
  return Status::Ok();
}

Result<PrepareSummary> PrepareImpl(const PrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](auto t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  TERN_RETURN_IF_ERROR(CheckOptions(o));
  PrepareSummary sum;
  TERN_ASSIGN_OR_RETURN(sum.files, CollectInputFiles(o.inputs, o.out_dir, &sum.warnings));
  std::vector<uint64_t> sizes;
  std::vector<std::string> nonempty;
  for (const auto& f : sum.files) {
    TERN_ASSIGN_OR_RETURN(TextCheck c, CheckTextFile(f));
    sizes.push_back(c.size);
    sum.bytes += c.size;
    if (c.size > 0) nonempty.push_back(f);
    if (c.invalid_utf8_bytes > 0) {
      sum.warnings.push_back(
          fmt::format("{}: {} bytes of its first {} are not valid UTF-8 and will decode as U+FFFD; "
                      "convert it with iconv for a lossless round trip",
                      f, c.invalid_utf8_bytes, c.sample_bytes));
    }
  }
  if (sum.bytes == 0) {
    return Status::InvalidArgument(fmt::format("the inputs hold no text: {} file(s), all empty (first: {})",
                                               sum.files.size(), sum.files.front()));
  }
  // A reused tokenizer is checked before anything is written.
  std::string reused_fingerprint;
  if (!o.tokenizer.empty()) {
    auto src = Tokenizer::Load(o.tokenizer);
    if (!src.ok()) return src.status().WithContext("--tokenizer " + o.tokenizer);
    if (o.vocab_size != 0 && o.vocab_size != src->vocab_size()) {
      return Status::InvalidArgument(fmt::format(
          "--vocab-size {} differs from the vocabulary of --tokenizer {} ({}); leave --vocab-size out to "
          "use that tokenizer as it is",
          o.vocab_size, o.tokenizer, src->vocab_size()));
    }
    reused_fingerprint = src->fingerprint();
  }
  TERN_RETURN_IF_ERROR(CheckExistingOutput(o, reused_fingerprint));

  TERN_RETURN_IF_ERROR(MakeDirs(o.out_dir));
  RemoveStaleStaging(o.out_dir);
  StagingGuard guard{fmt::format("{}/{}{}", o.out_dir, kStagingPrefix, ::getpid())};
  std::error_code ec;
  fs::remove_all(guard.dir, ec);
  TERN_RETURN_IF_ERROR(MakeDirs(guard.dir));

  auto t_tok = std::chrono::steady_clock::now();
  std::vector<std::string> names = {"tokenizer.model"};
  if (!o.tokenizer.empty()) {
    TERN_RETURN_IF_ERROR(CopyTokenizer(o.tokenizer, guard.dir, &names));
    sum.tokenizer_from = fs::absolute(o.tokenizer).lexically_normal().string();
    if (o.progress) fmt::print(o.progress, "tokenizer: {} (reused, not trained)\n", sum.tokenizer_from);
  } else {
    if (o.progress) {
      fmt::print(o.progress, "training tokenizer: vocab {} on {} of text ({} file(s))\n", o.vocab_size,
                 ProgressBar::FormatAmount(sum.bytes, "B"), nonempty.size());
    }
    TERN_RETURN_IF_ERROR(
        Tokenizer::Train(nonempty, guard.dir + "/tokenizer", o.vocab_size, o.max_sentences, o.progress));
    names.push_back("tokenizer.vocab");
  }
  TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(guard.dir + "/tokenizer.model"));
  sum.tokenizer_seconds = since(t_tok);
  sum.vocab_size = tok.vocab_size();
  sum.fingerprint = tok.fingerprint();

  SplitWriter train(guard.dir, "train", sum.vocab_size, o.shard_tokens, o.chat);
  SplitWriter val(guard.dir, "val", sum.vocab_size, o.shard_tokens, o.chat);
  if (o.chat) {
    TERN_RETURN_IF_ERROR(EncodeChat(o, sum.files, tok, &train, &val, &sum.chat));
  } else {
    TERN_RETURN_IF_ERROR(EncodeCorpus(o, sum.files, sizes, sum.bytes, tok, &train, &val));
  }
  sum.train_tokens = train.total();
  sum.val_tokens = val.total();
  sum.train_content = train.fingerprint();
  sum.val_content = val.fingerprint();
  if (o.val_fraction > 0 && sum.val_tokens == 0) {
    sum.warnings.push_back(
        fmt::format("no validation split: the corpus has fewer than {} lines (validation takes "
                    "whole blocks of {} lines)",
                    kLinesPerBlock + 1, kLinesPerBlock));
  }
  sum.bytes_per_token =
      static_cast<double>(sum.bytes) / std::max<uint64_t>(1, sum.train_tokens + sum.val_tokens);
  sum.seconds = since(t0);

  json j = {{"format", "tern-prepare"},
            {"version", 1},
            {"options", OptionsJson(o, reused_fingerprint)},
            {"files", json::array()},
            {"bytes", sum.bytes},
            {"tokens", {{"train", sum.train_tokens}, {"val", sum.val_tokens}}},
            {"content", {{"train", sum.train_content}, {"val", sum.val_content}}},
            {"shards", {{"train", train.files()}, {"val", val.files()}}},
            {"vocab_size", sum.vocab_size},
            {"tokenizer",
             {{"model", "tokenizer.model"},
              {"fingerprint", sum.fingerprint},
              {"unk_id", Tokenizer::kUnkId},
              {"bos_id", Tokenizer::kBosId},
              {"eos_id", tok.eos_id()},
              {"pad_id", Tokenizer::kPadId}}},
            {"val_fraction", o.val_fraction},
            {"lines_per_block", kLinesPerBlock},
            {"shard_tokens", o.shard_tokens},
            {"seconds", sum.seconds},
            {"tokenizer_seconds", sum.tokenizer_seconds},
            {"bytes_per_token", sum.bytes_per_token}};
  if (!sum.tokenizer_from.empty()) j["tokenizer"]["from"] = sum.tokenizer_from;
  if (o.chat) {
    j["chat"] = {
        {"conversations", {{"train", sum.chat.conversations[0]}, {"val", sum.chat.conversations[1]}}},
        {"trained_tokens", {{"train", sum.chat.trained_tokens[0]}, {"val", sum.chat.trained_tokens[1]}}},
        {"template", "data/chat.h ApplyChatTemplate; loss masks: *.mask.bin"}};
  }
  for (size_t i = 0; i < sum.files.size(); ++i)
    j["files"].push_back({{"path", sum.files[i]}, {"bytes", sizes[i]}});
  TERN_RETURN_IF_ERROR(WriteFileAtomic(guard.dir + "/prepare.json", j.dump(2) + "\n"));

  names.insert(names.end(), train.files().begin(), train.files().end());
  names.insert(names.end(), val.files().begin(), val.files().end());
  names.insert(names.end(), train.mask_files().begin(), train.mask_files().end());
  names.insert(names.end(), val.mask_files().begin(), val.mask_files().end());
  TERN_RETURN_IF_ERROR(Publish(guard.dir, o.out_dir, names));

  sum.tokenizer_path = o.out_dir + "/tokenizer.model";
  sum.summary_path = o.out_dir + "/prepare.json";
  for (const auto& f : train.files()) sum.train_shards.push_back(o.out_dir + "/" + f);
  for (const auto& f : val.files()) sum.val_shards.push_back(o.out_dir + "/" + f);
  return sum;
}

}  // namespace

bool IsValBlock(uint64_t block, double val_fraction) {
  if (val_fraction <= 0) return false;
  if (block <= 1) return block == 1;
  uint64_t h = XXH3_64bits(&block, sizeof(block));  // shards are little-endian only, so is this
  return h % 10000 < static_cast<uint64_t>(std::llround(val_fraction * 10000));
}

Result<std::vector<std::string>> CollectInputFiles(const std::vector<std::string>& inputs,
                                                   const std::string& skip_dir,
                                                   std::vector<std::string>* warnings) {
  std::vector<std::string> files;
  std::set<fs::path> seen;
  std::error_code ec;
  const fs::path skip = skip_dir.empty() ? fs::path() : fs::weakly_canonical(skip_dir, ec);
  auto under_skip = [&](const fs::path& canon) {
    if (skip.empty()) return false;
    auto [s, c] = std::mismatch(skip.begin(), skip.end(), canon.begin(), canon.end());
    return s == skip.end();
  };
  auto add = [&](const fs::path& p) {
    std::error_code canon_ec;
    fs::path canon = fs::weakly_canonical(p, canon_ec);
    if (canon_ec) canon = p;
    if (!seen.insert(canon).second) return;  // the same file named twice is read once
    files.push_back(p.string());
  };
  for (const auto& in : inputs) {
    fs::file_status st = fs::status(in, ec);
    if (!fs::exists(st)) return Status::NotFound(fmt::format("input {} does not exist; check the path", in));
    if (fs::is_regular_file(st)) {
      add(in);
    } else if (fs::is_directory(st)) {
      std::vector<fs::path> found;
      size_t skipped = 0;
      for (auto it = fs::recursive_directory_iterator(in, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code entry_ec;  // an entry that vanished or cannot be stat'ed is skipped, not fatal
        if (!it->is_regular_file(entry_ec)) continue;
        if (under_skip(fs::weakly_canonical(it->path(), entry_ec))) {
          ++skipped;
          continue;
        }
        found.push_back(it->path());
      }
      if (ec) return Status::IoError(fmt::format("cannot list input directory {}: {}", in, ec.message()));
      if (skipped && warnings)
        warnings->push_back(fmt::format("skipped {} file(s) of {} inside the output directory", skipped, in));
      if (found.empty())
        return Status::InvalidArgument(fmt::format("input directory {} contains no files", in));
      std::sort(found.begin(), found.end());
      for (const auto& f : found) add(f);
    } else {
      return Status::InvalidArgument(fmt::format("input {} is neither a regular file nor a directory", in));
    }
  }
  return files;
}

Result<PrepareSummary> Prepare(const PrepareOptions& options) {
  try {
    return PrepareImpl(options);
  } catch (const std::exception& e) {  // bad_alloc, thread creation, filesystem: report, do not crash
    return Status::Internal(fmt::format("tern prepare failed: {}", e.what()));
  }
}

}  // namespace tern
