#include "data/chat.h"

#include <fmt/format.h>

#include <algorithm>

namespace tern {

using nlohmann::json;

const char* JsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

namespace {

bool Fail(ChatParseError* e, std::string param, std::string message) {
  *e = {std::move(param), std::move(message)};
  return false;
}

bool WrongType(ChatParseError* e, const std::string& field, const char* want, const json& got) {
  return Fail(e, field, fmt::format("'{}' must be {}, not {}", field, want, JsonTypeName(got)));
}

}  // namespace

bool ParseChatMessages(const json& msgs, std::vector<ChatMessage>* out, ChatParseError* error) {
  if (!msgs.is_array()) return WrongType(error, "messages", "an array", msgs);
  if (msgs.empty()) return Fail(error, "messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs.size(); i++) {
    const std::string at = fmt::format("messages[{}]", i);
    const json& m = msgs[i];
    if (!m.is_object()) return WrongType(error, at, "an object", m);
    if (!m.contains("role") || !m["role"].is_string())
      return Fail(error, at + ".role", "'" + at + ".role' must be a string");
    ChatMessage cm{m["role"].get<std::string>(), ""};
    if (cm.role != "system" && cm.role != "developer" && cm.role != "user" && cm.role != "assistant")
      return Fail(
          error, at + ".role",
          "'" + at + ".role' must be one of system, developer, user, assistant; got '" + cm.role + "'");
    const json content = m.value("content", json());
    if (content.is_string()) {
      cm.content = content.get<std::string>();
    } else if (content.is_array()) {  // content parts: only text parts are understood
      for (const json& part : content) {
        // Not part.value("type", ""): it throws on a type that is not a string (the fuzzer found it).
        const bool text_part = part.is_object() && part.contains("type") && part["type"].is_string() &&
                               part["type"] == "text" && part.contains("text") && part["text"].is_string();
        if (!text_part)
          return Fail(error, at + ".content",
                      "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        cm.content += part["text"].get<std::string>();
      }
    } else if (!(content.is_null() && cm.role == "assistant")) {
      return WrongType(error, at + ".content", "a string or an array of text parts", content);
    }
    out->push_back(std::move(cm));
  }
  return true;
}

std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages) {
  std::string system, turns;
  for (const auto& m : messages) {
    if (m.role == "system" || m.role == "developer") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else {
      turns += (m.role == "user" ? "User: " : "Assistant: ") + m.content + "\n";
    }
  }
  return (system.empty() ? "" : system + "\n\n") + turns + "Assistant:";
}

Result<std::vector<ChatMessage>> ParseChatLine(std::string_view line, const std::string& where) {
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument(fmt::format(
        "{}: not a JSON object; each line of a --chat file is one conversation, "
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"...\"}}, {{\"role\": \"assistant\", "
        "\"content\": \"...\"}}]}}",
        where));
  if (!j.contains("messages"))
    return Status::InvalidArgument(fmt::format(
        "{}: no \"messages\": each line is {{\"messages\": [...]}} (OpenAI's fine-tuning format)", where));
  std::vector<ChatMessage> messages;
  ChatParseError e;
  if (!ParseChatMessages(j["messages"], &messages, &e))
    return Status::InvalidArgument(fmt::format("{}: {}", where, e.message));
  if (std::none_of(messages.begin(), messages.end(),
                   [](const ChatMessage& m) { return m.role == "assistant" && !m.content.empty(); }))
    return Status::InvalidArgument(fmt::format(
        "{}: no assistant message with text: a conversation teaches the model only its assistant replies",
        where));
  return messages;
}

std::vector<ChatSegment> ChatTrainingSegments(const std::vector<ChatMessage>& messages) {
  std::string system;
  for (const auto& m : messages)
    if (m.role == "system" || m.role == "developer") system += (system.empty() ? "" : "\n") + m.content;
  std::vector<ChatSegment> out;
  std::string read = system.empty() ? "" : system + "\n\n";  // the untrained text since the last reply
  for (const auto& m : messages) {
    if (m.role == "user") {
      read += "User: " + m.content + "\n";
    } else if (m.role == "assistant") {
      out.push_back({read + "Assistant:", false});
      out.push_back({" " + m.content + "\n", true});
      read.clear();
    }
  }
  if (!read.empty()) out.push_back({read, false});
  return out;
}

}  // namespace tern
