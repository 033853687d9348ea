// Response bodies of the OpenAI API (api.h): completions, chat completions, their streaming chunks, the
// logprobs objects of both, models. Objects keep their keys in insertion order (ordered_json): OpenAI's
// order for the envelopes, and most likely first in a completion's top_logprobs maps.
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "serve/api.h"

namespace tern {
namespace {

using ojson = nlohmann::ordered_json;

// The text is whatever the model produced; replacing invalid UTF-8 keeps dump() from throwing.
std::string Dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool IsControl(int32_t id) {
  return id == Tokenizer::kUnkId || id == Tokenizer::kBosId || id == Tokenizer::kEosId;
}

// The bytes a token contributes to the text. Byte pieces (ids 3..258, tokenizer.h) are single bytes that
// decode to U+FFFD on their own, so they are mapped directly; control tokens add nothing.
std::string TokenBytes(const Tokenizer& tok, int32_t id) {
  if (IsControl(id)) return "";
  if (id >= 3 && id < 3 + 256) return std::string(1, static_cast<char>(id - 3));
  return tok.Decode(&id, 1);
}

bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (int k = 1; k < len; k++)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// How a token is shown: its text; control tokens by name; part of a character as OpenAI shows it,
// "bytes:\xe2\x80".
std::string TokenString(const Tokenizer& tok, int32_t id) {
  if (id == Tokenizer::kEosId) return "</s>";
  if (id == Tokenizer::kBosId) return "<s>";
  if (id == Tokenizer::kUnkId) return "<unk>";
  const std::string b = TokenBytes(tok, id);
  if (ValidUtf8(b)) return b;
  std::string out = "bytes:";
  for (unsigned char c : b) out += fmt::format("\\x{:02x}", c);
  return out;
}

ojson Bytes(const Tokenizer& tok, int32_t id) {
  if (IsControl(id)) return nullptr;
  ojson a = ojson::array();
  for (unsigned char c : TokenBytes(tok, id)) a.push_back(static_cast<int>(c));
  return a;
}

ojson Logprob(float lp) {
  return std::isnan(lp) ? ojson() : ojson(lp);
}

// /v1/completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. top_logprobs maps token
// strings to logprobs: the k best plus the chosen token (so up to k + 1 entries, as OpenAI), most likely
// first (a chosen token outside the k best is no more likely than the k-th, so it goes last).
ojson CompletionLogprobs(const Tokenizer& tok, const ChoiceOut& c) {
  ojson tokens = ojson::array(), lps = ojson::array(), tops = ojson::array(), offsets = ojson::array();
  int offset = c.text_offset;
  for (const TokenLogprob& t : c.logprobs) {
    tokens.push_back(TokenString(tok, t.token));
    lps.push_back(Logprob(t.logprob));
    if (std::isnan(t.logprob)) {
      tops.push_back(nullptr);
    } else {
      ojson top = ojson::object();
      for (const auto& [id, lp] : t.top) top.emplace(TokenString(tok, id), lp);  // first (best) wins a tie
      top.emplace(TokenString(tok, t.token), t.logprob);
      tops.push_back(std::move(top));
    }
    offsets.push_back(offset);
    offset += TokenChars(tok, t.token);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
ojson ChatLogprobs(const Tokenizer& tok, const ChoiceOut& c) {
  ojson content = ojson::array();
  for (const TokenLogprob& t : c.logprobs) {
    ojson top = ojson::array();
    for (const auto& [id, lp] : t.top)
      top.push_back({{"token", TokenString(tok, id)}, {"logprob", lp}, {"bytes", Bytes(tok, id)}});
    content.push_back({{"token", TokenString(tok, t.token)},
                       {"logprob", Logprob(t.logprob)},
                       {"bytes", Bytes(tok, t.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

ojson LogprobsOf(const ResponseMeta& m, const ChoiceOut& c) {
  if (!c.has_logprobs || !m.tokenizer) return nullptr;
  return m.chat ? ChatLogprobs(*m.tokenizer, c) : CompletionLogprobs(*m.tokenizer, c);
}

ojson UsageObject(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ojson Envelope(const ResponseMeta& m, const char* object) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}};
}

ojson Reason(FinishReason f) {
  return f == FinishReason::kNone ? ojson() : ojson(FinishReasonName(f));
}

}  // namespace

int TokenChars(const Tokenizer& tok, int32_t id) {
  int n = 0;
  for (unsigned char c : TokenBytes(tok, id)) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<TokenLogprob> EchoLogprobs(const std::vector<int32_t>& prompt,
                                       const std::vector<TokenLogprob>& prompt_lp) {
  std::vector<TokenLogprob> out;
  if (prompt.empty()) return out;
  out.push_back({prompt[0], std::nanf(""), {}});
  out.insert(out.end(), prompt_lp.begin(), prompt_lp.end());
  return out;
}

ResponseMeta NewResponseMeta(const std::string& model, bool chat, const Tokenizer* tokenizer) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  ResponseMeta m;
  m.id = fmt::format("{}-{:016x}{:08x}", chat ? "chatcmpl" : "cmpl", rng(), static_cast<uint32_t>(rng()));
  m.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  m.model = model;
  m.chat = chat;
  m.tokenizer = tokenizer;
  return m;
}

std::string CompletionJson(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, const Usage& u) {
  ojson j = Envelope(m, m.chat ? "chat.completion" : "text_completion");
  j["choices"] = ojson::array();
  for (const ChoiceOut& c : choices) {
    ojson choice = ojson::object();
    if (m.chat) {
      choice["index"] = c.index;
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
      choice["index"] = c.index;
    }
    choice["logprobs"] = LogprobsOf(m, c);
    choice["finish_reason"] = Reason(c.finish);
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = UsageObject(u);
  return Dump(j);
}

std::string ChunkJson(const ResponseMeta& m, const ChoiceOut& c, bool role_only) {
  ojson j = Envelope(m, m.chat ? "chat.completion.chunk" : "text_completion");
  ojson choice = ojson::object();
  if (m.chat) {
    choice["index"] = c.index;
    if (role_only) {
      choice["delta"] = {{"role", "assistant"}, {"content", ""}};
    } else {
      choice["delta"] =
          c.finish == FinishReason::kNone || !c.text.empty() ? ojson{{"content", c.text}} : ojson::object();
    }
  } else {
    choice["text"] = c.text;
    choice["index"] = c.index;
  }
  choice["logprobs"] = LogprobsOf(m, c);
  choice["finish_reason"] = Reason(c.finish);
  j["choices"] = ojson::array({choice});
  return Dump(j);
}

std::string UsageChunkJson(const ResponseMeta& m, const Usage& u) {
  ojson j = Envelope(m, m.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = ojson::array();
  j["usage"] = UsageObject(u);
  return Dump(j);
}

std::string ModelJson(const std::string& model, int64_t created, const std::string& parent,
                      const std::string& root) {
  ojson j = {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "tern"}};
  if (!root.empty()) j["root"] = root;
  if (!parent.empty()) j["parent"] = parent;
  return Dump(j);
}

std::string ModelsJson(const std::string& model, const std::vector<ServedAdapters::Entry>& adapters,
                       int64_t created) {
  ojson data = ojson::array({ojson::parse(ModelJson(model, created))});
  for (const auto& a : adapters) data.push_back(ojson::parse(ModelJson(a.name, a.created, model, a.source)));
  return Dump(ojson{{"object", "list"}, {"data", data}});
}

}  // namespace tern
