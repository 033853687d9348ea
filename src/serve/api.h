// The OpenAI-compatible API as pure functions: request JSON -> native structs (with errors that name the
// offending field), and results -> response JSON. No HTTP here, so all of it is unit-testable. Parsing is
// in api.cpp, responses in api_response.cpp.
//
// Shapes follow the OpenAI API reference (https://platform.openai.com/docs/api-reference): completions,
// chat completions, their streaming chunks, models, and the error object
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "data/chat.h"
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "serve/served_adapters.h"

namespace tern {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault ("" = none)
  std::string code;   // machine-readable reason ("" = none)
};
std::string ErrorJson(const ApiError& e);
// A 400 invalid_request_error about the request field `param` ("" = the body).
ApiError BadRequest(std::string param, std::string message, std::string code = "");

// What the parser needs to know about the served model.
struct ApiContext {
  std::string model_name;
  const Tokenizer* tokenizer = nullptr;
  int max_seq_len = 0;                       // prompt + completion tokens
  const ServedAdapters* adapters = nullptr;  // LoRA adapters served beside it, by name (null: none)
};

inline constexpr int kMaxCompletionLogprobs = 5;  // /v1/completions `logprobs`, as OpenAI
inline constexpr int kMaxPriority = 1000;         // `priority` is within [-1000, 1000]
inline constexpr int kMaxN = 16;                  // choices (and best_of) per request: sequences in the batch

struct ParsedRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk carries the usage
  bool echo = false;           // completions: the prompt text (and its logprobs) comes before the completion
  std::string echo_text;       // the prompt as text
  int n = 1;                   // choices in the response
  bool logprobs = false;       // the response shows logprobs
  std::string model;           // the served model the request named (the base model when it named none);
                               // a LoRA adapter's name sets gen.adapter
  GenerationRequest gen;       // prompt tokenized, max_tokens resolved (0 only with echo), seed drawn if none
                               // was given; n (best_of when larger: candidates, ranked by the response),
                               // logprobs (-1 = off; at least 0 when candidates are ranked) and
                               // prompt_logprobs (echo with logprobs) set
  bool ranks() const { return gen.n > n; }  // best_of > n: only the n best of gen.n candidates are returned
};

// Parses and validates a /v1/completions (chat = false) or /v1/chat/completions body.
std::variant<ParsedRequest, ApiError> ParseRequest(std::string_view body, bool chat, const ApiContext& ctx);

// POST /tokenize (vLLM's): {"prompt": text or token ids} or {"messages": [...]} (the chat template applied,
// as a chat request's prompt), optional "model" and "return_token_strs" -> {"count", "max_model_len",
// "tokens", "token_strs"}: what a request would cost and whether it fits before sending it.
std::variant<std::string, ApiError> TokenizeResponse(std::string_view body, const ApiContext& ctx);
// POST /detokenize: {"tokens": [ids]} -> {"prompt": text}.
std::variant<std::string, ApiError> DetokenizeResponse(std::string_view body, const ApiContext& ctx);

// The chat template (ApplyChatTemplate, kChatStop) and ChatMessage are data/chat.h's: prepare --chat trains
// on the same text.

// Response bodies. `id` is "cmpl-..." or "chatcmpl-...", `created` Unix seconds.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool chat = false;
  const Tokenizer* tokenizer = nullptr;  // turns logprob tokens into strings
};
ResponseMeta NewResponseMeta(const std::string& model, bool chat, const Tokenizer* tokenizer = nullptr);
struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// One choice of a response, or its part in a streaming chunk.
struct ChoiceOut {
  int index = 0;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  bool has_logprobs = false;           // false: "logprobs": null
  std::vector<TokenLogprob> logprobs;  // in text order; logprob NaN: an echoed first prompt token (null)
  int text_offset = 0;                 // completions: characters of `text` before the first of them
};
std::string CompletionJson(const ResponseMeta& m, const std::vector<ChoiceOut>& choices, const Usage& u);
// A streaming chunk: delta text (and logprobs) of one choice, or (finish != kNone) the chunk that carries
// finish_reason. role_only: the first chat chunk of a choice, {"role": "assistant"}.
std::string ChunkJson(const ResponseMeta& m, const ChoiceOut& c, bool role_only = false);
std::string UsageChunkJson(const ResponseMeta& m, const Usage& u);

// Characters a token adds to the text (UTF-8 lead bytes of its bytes): advances `text_offset`.
int TokenChars(const Tokenizer& tok, int32_t id);
// The prompt's logprob entries for an echo: the first token has none (NaN), entry i + 1 is prompt_lp[i].
std::vector<TokenLogprob> EchoLogprobs(const std::vector<int32_t>& prompt,
                                       const std::vector<TokenLogprob>& prompt_lp);
// The model list: the base model, then each adapter with "parent": the base and "root": where it was loaded
// from (as vLLM lists LoRA modules).
std::string ModelsJson(const std::string& model, const std::vector<ServedAdapters::Entry>& adapters,
                       int64_t created);
std::string ModelJson(const std::string& model, int64_t created, const std::string& parent = "",
                      const std::string& root = "");

}  // namespace tern
