#include "serve/api.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

namespace tern {
namespace {

using json = nlohmann::json;

// The text is whatever the model produced; replacing invalid UTF-8 keeps dump() from throwing.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

ApiError WrongType(const std::string& field, const char* want, const json& got) {
  return BadRequest(field, fmt::format("'{}' must be {}, not {}", field, want, JsonTypeName(got)));
}

// Optional fields: absent or null leaves *out as it is.
std::optional<ApiError> GetNumber(const json& body, const char* field, double lo, double hi, float* out) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  const json& v = body[field];
  if (!v.is_number()) return WrongType(field, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    return BadRequest(field, fmt::format("'{}' must be between {} and {}, got {}", field, lo, hi, x));
  *out = static_cast<float>(x);
  return std::nullopt;
}

std::optional<ApiError> GetInt(const json& body, const char* field, int64_t lo, int64_t hi, int64_t* out) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  const json& v = body[field];
  if (!v.is_number_integer() && !v.is_number_unsigned()) return WrongType(field, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return BadRequest(field, fmt::format("'{}' is out of range", field));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    return BadRequest(field, fmt::format("'{}' must be between {} and {}, got {}", field, lo, hi, x));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> GetBool(const json& body, const char* field, bool* out) {
  if (!body.contains(field) || body[field].is_null()) return std::nullopt;
  if (!body[field].is_boolean()) return WrongType(field, "a boolean", body[field]);
  *out = body[field].get<bool>();
  return std::nullopt;
}

// prompt: a string, an array of token ids, or an array holding exactly one of those (n = 1).
std::optional<ApiError> ParsePrompt(const json& body, const ApiContext& ctx, std::vector<int32_t>* out) {
  if (!body.contains("prompt") || body["prompt"].is_null())
    return BadRequest("prompt", "'prompt' is required");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    *out = ctx.tokenizer->Encode(p.get<std::string>());
  } else if (p.is_array()) {
    const int V = ctx.tokenizer->vocab_size();
    for (const json& t : p) {
      if (t.is_string() || t.is_array())
        return BadRequest("prompt", "only one prompt per request is supported");
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
        return BadRequest("prompt", fmt::format("'prompt' token ids must be integers in [0, {})", V));
      out->push_back(t.get<int32_t>());
    }
  } else {
    return WrongType("prompt", "a string or an array of token ids", p);
  }
  if (out->empty()) return BadRequest("prompt", "'prompt' must not be empty");
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const json& body, std::vector<ChatMessage>* out) {
  if (!body.contains("messages") || body["messages"].is_null())
    return BadRequest("messages", "'messages' is required");
  ChatParseError e;
  if (!ParseChatMessages(body["messages"], out, &e)) return BadRequest(e.param, e.message);
  return std::nullopt;
}

// presence_penalty, frequency_penalty (-2..2) and logit_bias ({"token id": -100..100}), as OpenAI's.
std::optional<ApiError> ParseLogitAdjustments(const json& body, int vocab, GenerationRequest* g) {
  if (auto e = GetNumber(body, "presence_penalty", -2, 2, &g->presence_penalty)) return e;
  if (auto e = GetNumber(body, "frequency_penalty", -2, 2, &g->frequency_penalty)) return e;
  if (!body.contains("logit_bias") || body["logit_bias"].is_null()) return std::nullopt;
  const json& bias = body["logit_bias"];
  if (!bias.is_object()) return WrongType("logit_bias", "an object of token ids to numbers", bias);
  for (const auto& [key, value] : bias.items()) {
    int32_t token = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), token);
    if (ec != std::errc() || end != key.data() + key.size() || token < 0 || token >= vocab)
      return BadRequest(
          "logit_bias",
          fmt::format("'logit_bias' keys are token ids between 0 and {}, got '{}'", vocab - 1, key));
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
      return BadRequest("logit_bias",
                        fmt::format("'logit_bias' values are numbers between -100 and 100, got {} for "
                                    "token {}",
                                    value.dump(), key));
    g->logit_bias.emplace_back(token, value.get<float>());
  }
  return std::nullopt;
}

// response_format: {"type": "text"} (the default), {"type": "json_object"} (the completion is one JSON
// object: infer/json_constraint.h) or {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
// (one JSON document the schema accepts: the subset of infer/json_schema.h). The schema is read again from
// the body's text as an ordered_json: its properties are emitted in the order the client listed them.
std::optional<ApiError> ParseResponseFormat(const json& body, std::string_view body_text,
                                            GenerationRequest* g) {
  if (!body.contains("response_format") || body["response_format"].is_null()) return std::nullopt;
  const json& rf = body["response_format"];
  if (!rf.is_object())
    return WrongType("response_format", R"(an object such as {"type": "json_object"})", rf);
  if (!rf.contains("type") || !rf["type"].is_string())
    return BadRequest("response_format.type",
                      R"('response_format.type' is required: "text", "json_object" or "json_schema")");
  const std::string type = rf["type"].get<std::string>();
  if (type == "json_object") {
    g->json_object = true;
  } else if (type == "json_schema") {
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      return BadRequest("response_format.json_schema",
                        R"('response_format.json_schema' is required: {"name": "...", "schema": {...}})");
    const json& js = rf["json_schema"];
    for (const auto& [k, v] : js.items())
      if (k != "name" && k != "schema" && k != "strict" && k != "description")
        return BadRequest(
            "response_format.json_schema." + k,
            fmt::format("'response_format.json_schema.{}' is not supported (name, schema, strict, "
                        "description)",
                        k));
    if (js.contains("name") && !js["name"].is_string())
      return WrongType("response_format.json_schema.name", "a string", js["name"]);
    if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
      return WrongType("response_format.json_schema.strict", "a boolean", js["strict"]);
    if (!js.contains("schema"))
      return BadRequest(
          "response_format.json_schema.schema",
          R"('response_format.json_schema.schema' is required, e.g. {"type": "object", "properties": {...}})");
    nlohmann::ordered_json ordered;
    try {  // the text parsed as json already; .at() for safety
      ordered = nlohmann::ordered_json::parse(body_text).at("response_format").at("json_schema").at("schema");
    } catch (const nlohmann::ordered_json::exception& e) {
      return BadRequest("response_format.json_schema.schema",
                        std::string("cannot read the schema: ") + e.what());
    }
    auto compiled = CompileJsonSchema(ordered, "response_format.json_schema.schema");
    if (auto* e = std::get_if<JsonSchemaError>(&compiled)) return BadRequest(e->path, e->message);
    g->json_schema = std::get<std::shared_ptr<const JsonSchema>>(std::move(compiled));
  } else if (type != "text") {
    return BadRequest(
        "response_format.type",
        fmt::format(R"('response_format.type' must be "text", "json_object" or "json_schema", got '{}')",
                    type));
  }
  return std::nullopt;
}

// Fields of the OpenAI API that tern does not implement: accepted at their neutral value, refused otherwise.
std::optional<ApiError> CheckUnsupported(const json& body) {
  if (body.contains("suffix") && !body["suffix"].is_null() && body["suffix"] != "")
    return BadRequest("suffix", "'suffix' is not supported");
  if (body.contains("tools") && !body["tools"].is_null() && !body["tools"].empty())
    return BadRequest("tools", "'tools' is not supported");
  return std::nullopt;
}

// n, best_of and logprobs (after echo and stream). Completions: `best_of` candidates (default n, at least n,
// not streamed when more), `logprobs` an integer 0..5 (alternatives per token). Chat: no best_of (only 1),
// `logprobs` a boolean and `top_logprobs` an integer 0..20 that needs it.
std::optional<ApiError> ParseChoicesAndLogprobs(const json& body, bool chat, ParsedRequest* r) {
  int64_t n = 1;
  if (auto e = GetInt(body, "n", 1, kMaxN, &n)) return e;
  int64_t best_of = chat ? 1 : n;
  if (auto e = GetInt(body, "best_of", 1, chat ? 1 : kMaxN, &best_of)) {
    if (chat) e->message = "'best_of' is only for /v1/completions";
    return e;
  }
  if (!chat && best_of < n)
    return BadRequest("best_of",
                      fmt::format("'best_of' ({}) must be at least 'n' ({}): the n best of best_of "
                                  "candidates are returned",
                                  best_of, n));
  if (!chat && best_of > n && r->stream)
    return BadRequest("best_of",
                      "'best_of' larger than 'n' cannot be streamed (the best are known only at the end)");
  r->n = static_cast<int>(n);
  r->gen.n = static_cast<int>(chat ? n : best_of);
  int64_t k = -1;
  if (chat) {
    bool want = false;
    if (auto e = GetBool(body, "logprobs", &want)) return e;
    int64_t top = 0;
    if (auto e = GetInt(body, "top_logprobs", 0, kMaxTopLogprobs, &top)) return e;
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null() && !want)
      return BadRequest("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (want) k = top;
  } else {
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null())
      return BadRequest("top_logprobs",
                        "'top_logprobs' is a chat field; /v1/completions takes 'logprobs': 0..5");
    // `false` is what some clients send for "off"
    if (!(body.contains("logprobs") && body["logprobs"] == false))
      if (auto e = GetInt(body, "logprobs", 0, kMaxCompletionLogprobs, &k)) return e;
  }
  r->logprobs = k >= 0;
  // ranking candidates needs every generated token's logprob, shown or not
  r->gen.logprobs = static_cast<int>(r->ranks() ? std::max<int64_t>(k, 0) : k);
  r->gen.prompt_logprobs = r->echo && k >= 0;
  return std::nullopt;
}

}  // namespace

ApiError BadRequest(std::string param, std::string message, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

std::string ErrorJson(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return Dump(json{{"error", err}});
}

namespace {

// The body as a JSON object, or the error that says why it is not one.
std::variant<json, ApiError> ParseObject(std::string_view body_text) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number too large for a double
    std::string what = e.what();
    const size_t at = what.find("parse error");
    return BadRequest(
        "", "the request body is not valid JSON: " + (at == std::string::npos ? what : what.substr(at)));
  }
  if (!body.is_object()) return BadRequest("", "the request body must be a JSON object");
  return body;
}

// "model": the served model (none: the base model) and its LoRA adapter (0: none); 404 for another name.
std::optional<ApiError> ResolveModel(const json& body, const ApiContext& ctx, std::string* model,
                                     int* adapter) {
  *model = ctx.model_name;
  *adapter = 0;
  if (!body.contains("model") || body["model"].is_null()) return std::nullopt;
  if (!body["model"].is_string()) return WrongType("model", "a string", body["model"]);
  *model = body["model"].get<std::string>();
  const auto found = ctx.adapters && *model != ctx.model_name ? ctx.adapters->Find(*model) : std::nullopt;
  if (found) {
    *adapter = found->id;
  } else if (*model != ctx.model_name) {
    std::string served = "'" + ctx.model_name + "'";
    if (ctx.adapters)
      for (const std::string& a : ctx.adapters->Names()) served += ", '" + a + "'";
    return ApiError{404, fmt::format("The model '{}' does not exist; this server serves {}", *model, served),
                    "invalid_request_error", "model", "model_not_found"};
  }
  return std::nullopt;
}

// A /tokenize or /detokenize body: a JSON object whose "model", if any, is served.
std::variant<json, ApiError> ParseTokenizerBody(std::string_view body_text, const ApiContext& ctx) {
  auto parsed = ParseObject(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  std::string model;
  int adapter = 0;
  if (auto e = ResolveModel(std::get<json>(parsed), ctx, &model, &adapter)) return *e;
  return parsed;
}

}  // namespace

std::variant<std::string, ApiError> TokenizeResponse(std::string_view body_text, const ApiContext& ctx) {
  auto parsed = ParseTokenizerBody(body_text, ctx);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  std::vector<int32_t> tokens;
  if (body.contains("messages")) {
    std::vector<ChatMessage> messages;
    if (auto e = ParseMessages(body, &messages)) return *e;
    tokens = ctx.tokenizer->Encode(ApplyChatTemplate(messages));
  } else {
    if (auto e = ParsePrompt(body, ctx, &tokens)) return *e;
  }
  bool strs = false;
  if (auto e = GetBool(body, "return_token_strs", &strs)) return *e;
  json out = {{"count", tokens.size()}, {"max_model_len", ctx.max_seq_len}, {"tokens", tokens}};
  out["token_strs"] = nullptr;
  if (strs) {
    out["token_strs"] = json::array();
    for (int32_t t : tokens) out["token_strs"].push_back(ctx.tokenizer->Decode(&t, 1));
  }
  return Dump(out);
}

std::variant<std::string, ApiError> DetokenizeResponse(std::string_view body_text, const ApiContext& ctx) {
  auto parsed = ParseTokenizerBody(body_text, ctx);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  if (!body.contains("tokens") || !body["tokens"].is_array())
    return BadRequest("tokens", "'tokens' must be an array of token ids");
  const int V = ctx.tokenizer->vocab_size();
  std::vector<int32_t> tokens;
  for (const json& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
      return BadRequest("tokens", fmt::format("'tokens' must be integers in [0, {})", V));
    tokens.push_back(t.get<int32_t>());
  }
  return Dump(json{{"prompt", ctx.tokenizer->Decode(tokens)}});
}

std::variant<ParsedRequest, ApiError> ParseRequest(std::string_view body_text, bool chat,
                                                   const ApiContext& ctx) {
  auto parsed = ParseObject(body_text);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& body = std::get<json>(parsed);
  std::string model;
  int adapter = 0;
  if (auto e = ResolveModel(body, ctx, &model, &adapter)) return *e;
  if (auto e = CheckUnsupported(body)) return *e;

  ParsedRequest r;
  r.chat = chat;
  r.model = model;
  r.gen.adapter = adapter;
  GenerationRequest& g = r.gen;
  std::string prompt_field = "prompt";
  if (chat) {
    std::vector<ChatMessage> messages;
    if (auto e = ParseMessages(body, &messages)) return *e;
    g.prompt = ctx.tokenizer->Encode(ApplyChatTemplate(messages));
    g.stop.push_back(kChatStop);
    prompt_field = "messages";
  } else if (auto e = ParsePrompt(body, ctx, &g.prompt)) {
    return *e;
  }
  if (auto e = GetBool(body, "echo", &r.echo)) return *e;
  if (chat && r.echo) return BadRequest("echo", "'echo' is only for /v1/completions");
  // echo with max_tokens 0 scores the prompt alone (evaluation harnesses): it may fill the whole context
  const bool score_only = r.echo && body.contains("max_tokens") && body["max_tokens"].is_number_integer() &&
                          body["max_tokens"] == 0;
  const int P = static_cast<int>(g.prompt.size());
  if (P + (score_only ? 0 : 1) > ctx.max_seq_len)
    return BadRequest(prompt_field,
                      fmt::format("this model's maximum context length is {} tokens and the prompt has {}{}",
                                  ctx.max_seq_len, P,
                                  score_only ? "" : " (at least one token must be left for the completion)"),
                      "context_length_exceeded");

  int64_t max_tokens = chat ? ctx.max_seq_len - P : 16;  // OpenAI's defaults: chat until the context ends
  const char* mt_field =
      chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (auto e = GetInt(body, mt_field, chat ? 1 : 0, INT32_MAX, &max_tokens)) {
    e->message += " (max_tokens is the number of tokens to generate)";
    return *e;
  }
  if (max_tokens == 0 && !r.echo)
    return BadRequest(
        mt_field,
        "'max_tokens' must be at least 1; 0 is allowed only with 'echo': true (the prompt, scored with "
        "'logprobs', and no new tokens)");
  if (P + max_tokens > ctx.max_seq_len)
    return BadRequest(mt_field,
                      fmt::format("this model's maximum context length is {} tokens, but {} were requested "
                                  "({} in the prompt, {} for the completion); lower {}",
                                  ctx.max_seq_len, P + max_tokens, P, max_tokens, mt_field),
                      "context_length_exceeded");
  g.max_tokens = static_cast<int>(max_tokens);

  g.sampling = SamplingParams{1.0f, 0, 1.0f};  // OpenAI's defaults: temperature 1, no top-k, top_p 1
  if (auto e = GetNumber(body, "temperature", 0, 2, &g.sampling.temperature)) return *e;
  if (auto e = GetNumber(body, "top_p", 0, 1, &g.sampling.top_p)) return *e;
  if (g.sampling.top_p <= 0) return BadRequest("top_p", "'top_p' must be greater than 0");
  int64_t top_k = 0;
  if (auto e = GetInt(body, "top_k", 0, INT32_MAX, &top_k)) return *e;
  g.sampling.top_k = static_cast<int>(top_k);
  if (auto e = ParseLogitAdjustments(body, ctx.tokenizer->vocab_size(), &g)) return *e;
  int64_t priority = 0;  // vLLM's: lower is admitted sooner (a key's floor applies: server.cpp)
  if (auto e = GetInt(body, "priority", -kMaxPriority, kMaxPriority, &priority)) return *e;
  g.priority = static_cast<int>(priority);
  int64_t seed = 0;
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (auto e = GetInt(body, "seed", INT64_MIN, INT64_MAX, &seed)) return *e;
    g.seed = static_cast<uint64_t>(seed);
  } else {
    g.seed = RandomSeed();
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      g.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) return WrongType("stop", "a string or an array of up to 4 strings", x);
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of up to 4 strings", s);
    }
  }
  if (auto e = GetBool(body, "stream", &r.stream)) return *e;
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) return WrongType("stream_options", "an object", so);
    if (auto e = GetBool(so, "include_usage", &r.include_usage)) {
      e->param = "stream_options.include_usage";
      return *e;
    }
  }
  if (auto e = GetBool(body, "ignore_eos", &g.ignore_eos)) return *e;
  if (auto e = ParseResponseFormat(body, body_text, &g)) return *e;
  if (auto e = ParseChoicesAndLogprobs(body, chat, &r)) return *e;
  if (r.echo) {
    const json& p = body["prompt"];
    const json& one = p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array()) ? p[0] : p;
    r.echo_text = one.is_string() ? one.get<std::string>() : ctx.tokenizer->Decode(g.prompt);
  }
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string())
    return WrongType("user", "a string", body["user"]);
  return r;
}

}  // namespace tern
