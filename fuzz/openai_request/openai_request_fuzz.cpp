// OpenAI request bodies as `tern serve` parses them (ParseRequest): /v1/completions when the body's first
// byte is even, /v1/chat/completions when it is odd (and every body as /tokenize and /detokenize), against a
// 400-piece tokenizer trained at start-up (the serve tests' size) and a 128-token context.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/api.h"

namespace {

std::unique_ptr<tern::Tokenizer> g_tok;

std::string Corpus() {
  static const char* const kWords[] = {
      "the",  "and",   "of",   "to",   "in",     "that",   "he",    "shall",      "unto", "for",
      "lord", "his",   "they", "be",   "is",     "him",    "not",   "them",       "it",   "with",
      "all",  "thou",  "thy",  "was",  "which",  "my",     "god",   "me",         "said", "but",
      "ye",   "their", "have", "will", "hello,", "world.", "user:", "assistant:", "42",   "?"};
  std::string out;
  uint64_t x = 7;
  while (out.size() < 60000) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out += kWords[(x >> 33) % (sizeof(kWords) / sizeof(kWords[0]))];
    out += (x >> 20) % 11 == 0 ? "\n" : " ";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tern-fuzz-tok-" + std::to_string(getpid()));
  fs::create_directories(dir);
  if (FILE* f = std::fopen((dir / "corpus.txt").c_str(), "w")) {
    const std::string c = Corpus();
    std::fwrite(c.data(), 1, c.size(), f);
    std::fclose(f);
  }
  tern::Status st = tern::Tokenizer::Train({(dir / "corpus.txt").string()}, (dir / "tok").string(), 400);
  auto tok =
      st.ok() ? tern::Tokenizer::Load((dir / "tok.model").string()) : tern::Result<tern::Tokenizer>(st);
  fs::remove_all(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "openai_request_fuzz: cannot train its tokenizer: %s\n",
                 tok.status().ToString().c_str());
    std::abort();  // a harness's own set-up failure, not a finding
  }
  g_tok = std::make_unique<tern::Tokenizer>(std::move(tok).value());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const bool chat = size > 0 && (data[0] & 1);
  const tern::ApiContext ctx{"tiny", g_tok.get(), 128};
  auto r = tern::ParseRequest(body, chat, ctx);
  if (auto* p = std::get_if<tern::ParsedRequest>(&r)) {
    // What the engine is promised: the prompt and completion fit the context, every token is in the vocab.
    if (static_cast<int64_t>(p->gen.prompt.size()) + p->gen.max_tokens > ctx.max_seq_len) __builtin_trap();
    for (int32_t t : p->gen.prompt)
      if (t < 0 || t >= g_tok->vocab_size()) __builtin_trap();
  } else {
    (void)tern::ErrorJson(std::get<tern::ApiError>(r));
  }
  // The same body as /tokenize and /detokenize: an answer or an error, never a crash; tokens counted are the
  // tokens listed.
  auto t = tern::TokenizeResponse(body, ctx);
  if (auto* text = std::get_if<std::string>(&t)) {
    const auto j = nlohmann::json::parse(*text);
    if (j["count"].get<size_t>() != j["tokens"].size()) __builtin_trap();
  }
  (void)tern::DetokenizeResponse(body, ctx);
  return 0;
}
