// The OpenAI-compatible API as pure functions: request JSON -> native structs (with errors that name the
// offending field), and results -> response JSON. No HTTP here, so all of it is unit-testable.
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

#include "data/tokenizer.h"
#include "serve/engine.h"

namespace tern {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault ("" = none)
  std::string code;   // machine-readable reason ("" = none)
};
std::string ErrorJson(const ApiError& e);

// What the parser needs to know about the served model.
struct ApiContext {
  std::string model_name;
  const Tokenizer* tokenizer = nullptr;
  int max_seq_len = 0;  // prompt + completion tokens
};

struct ParsedRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk carries the usage
  GenerationRequest gen;       // prompt tokenized, max_tokens resolved, seed drawn if none was given
};

// Parses and validates a /v1/completions (chat = false) or /v1/chat/completions body.
std::variant<ParsedRequest, ApiError> ParseRequest(std::string_view body, bool chat, const ApiContext& ctx);

// The chat template for tern's base models (docs/serving.md): system messages first, then one line per turn,
//   "<system>\n\nUser: <text>\nAssistant: <text>\nUser: <text>\nAssistant:"
// and generation stops at the next "\nUser:".
struct ChatMessage {
  std::string role, content;
};
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages);
inline constexpr char kChatStop[] = "\nUser:";

// Response bodies. `id` is "cmpl-..." or "chatcmpl-...", `created` Unix seconds.
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool chat = false;
};
ResponseMeta NewResponseMeta(const std::string& model, bool chat);
struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
std::string CompletionJson(const ResponseMeta& m, const std::string& text, FinishReason finish,
                           const Usage& u);
// A streaming chunk: delta text, or (finish != kNone) the chunk that carries finish_reason. role_only: the
// first chat chunk, {"role": "assistant"}.
std::string ChunkJson(const ResponseMeta& m, const std::string& text, FinishReason finish,
                      bool role_only = false);
std::string UsageChunkJson(const ResponseMeta& m, const Usage& u);
std::string ModelsJson(const std::string& model, int64_t created);
std::string ModelJson(const std::string& model, int64_t created);

}  // namespace tern
