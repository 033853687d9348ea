// tern prepare: raw text -> tokenizer + train/val token shards (the library call is data/prepare.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/command.h"
#include "core/progress.h"
#include "data/prepare.h"
#include "registry/model_uri.h"
#include "train/remote_data.h"

namespace tern::cli {

namespace {

struct PrepareArgs {
  PrepareOptions options;
  int64_t shard_tokens = 100'000'000;
  int64_t max_sentences = 2'000'000;
  std::string verify;                  // --verify DIR
  std::string s3_endpoint, cache_dir;  // --out/--verify s3://...
  bool force_remote = false;           // --force (options.force for a local --out)
};

ckpt::S3Options S3For(const PrepareArgs& a) {
  ckpt::S3Options s3;
  s3.endpoint = a.s3_endpoint;
  return s3;
}

std::string Plural(size_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// --tokenizer: a tokenizer.model, or a directory holding one (a run, a prepared data directory, a registered
// model's models:/NAME@REF).
Result<std::string> ResolveTokenizer(const std::string& given) {
  TERN_ASSIGN_OR_RETURN(std::string path, registry::ResolveModelUri(given));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::string model = (std::filesystem::path(path) / "tokenizer.model").string();
    if (!std::filesystem::exists(model, ec))
      return Status::NotFound(fmt::format(
          "{} has no tokenizer.model; give a run directory, a prepared data directory or a tokenizer.model",
          path));
    return model;
  }
  if (!std::filesystem::exists(path, ec))
    return Status::NotFound(
        fmt::format("{} does not exist; give a run directory, a prepared data directory, models:/NAME@REF "
                    "or a tokenizer.model",
                    path));
  return path;
}

// A trained model (a run directory or a registered model) rather than a bare tokenizer or data directory.
bool IsModel(const std::string& given) {
  std::error_code ec;
  return registry::IsModelUri(given) ||
         std::filesystem::exists(std::filesystem::path(given) / "config.yaml", ec);
}

// --verify s3://...: the store's objects, fetched afresh into a scratch cache (a copy cached earlier proves
// nothing about the store now) and checked as a run's fetch checks them.
Result<VerifySummary> VerifyRemote(const PrepareArgs& a) {
  DataMirrorOptions m;
  m.s3 = S3For(a);
  m.cache_dir = (std::filesystem::path(a.cache_dir.empty() ? DefaultDataCache() : a.cache_dir) / "verify" /
                 std::to_string(::getpid()))
                    .string();
  auto copy = MirrorPreparedData(a.verify, m);
  Result<VerifySummary> r =
      copy.ok() ? VerifyPrepared(copy->local_dir) : Result<VerifySummary>(copy.status());
  std::error_code ec;
  std::filesystem::remove_all(m.cache_dir, ec);
  return r;
}

int RunVerify(const PrepareArgs& args) {
  const std::string& dir = args.verify;
  auto r = IsRemoteData(dir) ? VerifyRemote(args) : VerifyPrepared(dir, stderr);
  if (!r.ok()) {
    std::fprintf(stderr, "tern prepare --verify: %s\n", r.status().message().c_str());
    return 1;
  }
  auto content = [](const std::string& c) { return c.empty() ? std::string("unrecorded") : c; };
  fmt::print(
      "verified {}: {} read, every byte as tern prepare wrote it{}\n"
      "  train      {} tokens, content {}\n"
      "  val        {} tokens, content {}\n",
      dir, Plural(r->shards, "file"),
      r->unrecorded ? fmt::format(" ({} without a recorded hash: written by an older tern, sizes checked)",
                                  r->unrecorded)
                    : "",
      r->tokens[0], content(r->content[0]), r->tokens[1], content(r->content[1]));
  return 0;
}

int RunPrepare(PrepareArgs& args) {
  if (!args.verify.empty()) return RunVerify(args);
  PrepareOptions& o = args.options;
  if (o.inputs.empty() || o.out_dir.empty()) {
    std::fprintf(stderr, "tern prepare: --input and --out are required (or --verify DIR); see --help\n");
    return 2;
  }
  if (args.shard_tokens <= 0 || args.max_sentences <= 0) {
    std::fprintf(stderr, "tern prepare: --shard-tokens and --max-sentences must be positive\n");
    return 2;
  }
  o.force = args.force_remote;
  o.shard_tokens = static_cast<uint64_t>(args.shard_tokens);
  o.max_sentences = static_cast<uint64_t>(args.max_sentences);
  if (o.tokenizer.empty() && o.vocab_size == 0) {
    std::fprintf(stderr,
                 "tern prepare: pass --vocab-size N (train a new tokenizer) or --tokenizer PATH (reuse a "
                 "model's, to fine-tune it)\n");
    return 2;
  }
  const std::string model = o.tokenizer;  // as given: a run or models:/ ref is also what to fine-tune
  if (!o.tokenizer.empty()) {
    auto path = ResolveTokenizer(o.tokenizer);
    if (!path.ok()) {
      std::fprintf(stderr, "tern prepare: --tokenizer %s\n", path.status().message().c_str());
      return 1;
    }
    o.tokenizer = *path;
  }
  o.progress = stderr;
  // --out s3://...: prepared in a staging folder of the data cache, published (prepare.json last), and then
  // kept as this machine's cached copy, so a run here does not fetch what it just wrote.
  const std::string target = o.out_dir;
  const bool remote = IsRemoteData(target);
  const std::string cache = args.cache_dir.empty() ? DefaultDataCache() : args.cache_dir;
  if (remote) {
    o.out_dir = (std::filesystem::path(cache) / "staging" / fmt::format("prepare-{}", ::getpid())).string();
    o.force = true;  // the staging folder is ours; --force decides about the store (below)
  }
  auto r = Prepare(o);
  std::error_code ec;
  if (!r.ok()) {
    if (remote) std::filesystem::remove_all(o.out_dir, ec);
    std::fprintf(stderr, "tern prepare: %s\n", r.status().message().c_str());
    return 1;
  }
  PrepareSummary s = *r;
  if (remote) {
    auto pub = PublishPreparedData(o.out_dir, target, args.force_remote, S3For(args), stderr);
    Status kept = pub.ok() ? AdoptIntoDataCache(o.out_dir, target, cache) : pub.status();
    std::filesystem::remove_all(o.out_dir, ec);
    if (!kept.ok()) {
      std::fprintf(stderr, "tern prepare: %s\n", kept.message().c_str());
      return 1;
    }
    if (pub->files == 0)
      std::fprintf(stderr, "tern prepare: %s already holds this dataset: nothing uploaded\n", target.c_str());
    else
      std::fprintf(stderr, "tern prepare: published %d files (%s) to %s in %.1f s%s\n", pub->files,
                   ProgressBar::FormatAmount(static_cast<double>(pub->bytes), "B").c_str(), target.c_str(),
                   pub->seconds,
                   pub->removed
                       ? fmt::format("; {} objects of the replaced dataset deleted", pub->removed).c_str()
                       : "");
    auto in_store = [&](std::string& path) { path = target + path.substr(o.out_dir.size()); };
    for (auto& p : s.train_shards) in_store(p);
    for (auto& p : s.val_shards) in_store(p);
    in_store(s.tokenizer_path);
    in_store(s.summary_path);
    o.out_dir = target;
  }
  for (const auto& w : s.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  auto tokens = [](uint64_t n) { return ProgressBar::FormatAmount(static_cast<double>(n), "tokens"); };
  auto where = [](const std::vector<std::string>& shards) {
    if (shards.empty()) return std::string("(none)");
    return shards.size() == 1 ? shards[0] : fmt::format("{} .. {}", shards.front(), shards.back());
  };
  fmt::print(
      "prepared {} in {}\n"
      "  input      {}, {}\n"
      "  tokenizer  {} (vocab {}, fingerprint {}, {})\n"
      "  train      {} in {}: {}\n"
      "  val        {} in {}: {}\n"
      "  ratio      {:.2f} bytes per token\n"
      "  summary    {}\n"
      "next: tern train configs/demo.yaml --set data.dir={}{}\n",
      o.out_dir, ProgressBar::FormatDuration(s.seconds), Plural(s.files.size(), "file"),
      ProgressBar::FormatAmount(static_cast<double>(s.bytes), "B"), s.tokenizer_path, s.vocab_size,
      s.fingerprint,
      s.tokenizer_from.empty() ? fmt::format("trained in {:.1f} s", s.tokenizer_seconds)
                               : "reused from " + s.tokenizer_from,
      tokens(s.train_tokens), Plural(s.train_shards.size(), "shard"), where(s.train_shards),
      tokens(s.val_tokens), Plural(s.val_shards.size(), "shard"), where(s.val_shards), s.bytes_per_token,
      s.summary_path,
      remote && !args.s3_endpoint.empty() ? o.out_dir + " --set ckpt.s3_endpoint=" + args.s3_endpoint
                                          : o.out_dir,
      IsModel(model) ? " --set train.init_from=" + model + "   (docs/finetune.md)" : "");
  if (o.chat)
    fmt::print(
        "  chat       {} conversations ({} val); the loss learns {} of the {} train tokens (the replies)\n",
        s.chat.conversations[0] + s.chat.conversations[1], s.chat.conversations[1], s.chat.trained_tokens[0],
        s.train_tokens);
  // The same tokenizer as a dataset of its own: the two can be mixed (data.mix).
  if (!s.tokenizer_from.empty() && !IsModel(model) &&
      std::filesystem::exists(std::filesystem::path(s.tokenizer_from).parent_path() / "prepare.json"))
    fmt::print("  or mixed into that data: --set data.dir={} --set data.mix={}:0.3   (docs/finetune.md)\n",
               std::filesystem::path(s.tokenizer_from).parent_path().string(), o.out_dir);
  return 0;
}

}  // namespace

void AddPrepareCommand(CLI::App& root, CommandTable& table) {
  auto args = std::make_shared<PrepareArgs>();
  auto* sub =
      root.add_subcommand("prepare", "Train a tokenizer on raw text and write token shards for training");
  sub->footer(
      "What it does:\n"
      "  1. checks every input (text files, or directories searched recursively; binary, empty or "
      "unreadable\n"
      "     inputs are an error naming the file),\n"
      "  2. trains a lossless byte-level BPE tokenizer (SentencePiece, byte fallback: decode(encode(x)) == "
      "x),\n"
      "     or, with --tokenizer, reuses a trained model's,\n"
      "  3. streams the text through it (never loading a file whole) and writes token shards: blocks of 64\n"
      "     lines go to train or, for about --val-fraction of them, to val.\n\n"
      "It writes, in --out DIR:\n"
      "  tokenizer.model, tokenizer.vocab   the tokenizer (ids: 0 unk, 1 bos, 2 eos between files)\n"
      "  train_000.bin, train_001.bin, ...  training tokens, a new shard every --shard-tokens tokens\n"
      "  val_000.bin                        validation tokens (format: docs/formats.md)\n"
      "  prepare.json                       inputs, sizes, token counts, tokenizer fingerprint, content\n"
      "                                     (each split's XXH3; every shard's header holds its own)\n"
      "Nothing in DIR changes unless the whole run succeeds. A DIR prepared with other options is\n"
      "only replaced with --force. `tern prepare --verify DIR` reads it all back and checks every byte.\n"
      "A training run records the train split's content and refuses to resume on other tokens.\n\n"
      "Example (the King James Bible, 4.3 MB, about 10 s on 2 cores):\n"
      "  bible \"Gen1:1-Rev22:21\" > kjv.txt\n"
      "  tern prepare --input kjv.txt --out data/kjv --vocab-size 4096\n"
      "Data to fine-tune a trained model on keeps its tokenizer (docs/finetune.md):\n"
      "  tern prepare --input psalms.txt --out data/psalms --tokenizer runs/demo\n"
      "Published to S3, for runs on machines that do not have it (fetched, verified and cached by each):\n"
      "  tern prepare --input kjv.txt --out s3://my-bucket/data/kjv --vocab-size 4096\n"
      "Conversations to teach a trained model to chat (JSON Lines, {\"messages\": [...]} per line):\n"
      "  tern prepare --chat --input chats.jsonl --out data/chat --tokenizer runs/demo\n");
  sub->add_option("--input,-i", args->options.inputs,
                  "Text files or directories to read (one or more; required unless --verify)")
      ->expected(1, -1);
  sub->add_option(
      "--out,-o", args->options.out_dir,
      "Output directory (created if missing; required), or s3://BUCKET/PREFIX: prepared here, then "
      "published there with prepare.json last, for runs on any machine (data.dir: s3://...; "
      "docs/formats.md)");
  sub->add_option(
      "--vocab-size", args->options.vocab_size,
      "Tokenizer vocabulary size: at least 260 + the number of distinct characters; 4096-8192 suits a "
      "few MB of text, 32768-50257 a large corpus (not with --tokenizer)");
  sub->add_option("--tokenizer", args->options.tokenizer,
                  "Encode with this existing tokenizer instead of training one: a run directory, a prepared "
                  "data directory, models:/NAME@REF or a tokenizer.model (data to fine-tune that model on)");
  sub->add_option("--val-fraction", args->options.val_fraction,
                  "Share of the text held out for validation (0..0.5)")
      ->capture_default_str();
  sub->add_option("--shard-tokens", args->shard_tokens, "Tokens per shard file before a new one starts")
      ->capture_default_str();
  sub->add_option("--max-sentences", args->max_sentences,
                  "Lines sampled to train the tokenizer (bounds its memory and time on huge corpora)")
      ->capture_default_str();
  sub->add_option("--threads", args->options.threads, "Encoding threads (0 = one per core)")
      ->capture_default_str();
  sub->add_flag(
      "--chat", args->options.chat,
      "Inputs are conversations, one {\"messages\": [...]} per line (OpenAI's fine-tuning format): "
      "rendered with tern serve's chat template, with loss masks so training learns the assistant's "
      "replies only; needs --tokenizer (docs/finetune.md)");
  sub->add_flag("--force", args->force_remote,
                "Replace an output directory prepared with different options (or, for s3://, a prefix "
                "holding another dataset)");
  sub->add_option("--s3-endpoint", args->s3_endpoint,
                  "S3-compatible endpoint for --out/--verify s3://... (MinIO, R2, moto); default "
                  "$AWS_ENDPOINT_URL_S3, else AWS");
  sub->add_option(
      "--cache-dir", args->cache_dir,
      "Where --out s3://... prepares before uploading and keeps its copy (the data cache runs read; "
      "default $TERN_DATA_CACHE, else ~/.cache/tern/data)");
  sub->add_option(
      "--verify", args->verify,
      "Check a prepared DIR instead: read every shard and loss mask and compare it with the hash "
      "tern prepare recorded in its header, and the splits with prepare.json (exit 1 names the "
      "first file that differs); an s3://BUCKET/PREFIX is fetched afresh into a scratch folder and checked");
  table.Add(sub, [args] { return RunPrepare(*args); });
}

}  // namespace tern::cli
