// Chat: the messages of OpenAI's API and fine-tuning files, and the text convention tern's models chat in.
// `tern serve` renders a request's messages with ApplyChatTemplate and stops at kChatStop; `tern prepare
// --chat` renders training conversations the same way, marking which tokens the model learns to produce
// (the assistant's replies) and which it only reads (docs/finetune.md, "Chat").
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern {

struct ChatMessage {
  std::string role, content;  // role: system | developer | user | assistant
};

// A JSON value's kind in words ("a string", "an array", "null", ...), for messages that say what was given.
const char* JsonTypeName(const nlohmann::json& v);

// What is wrong with a messages array: the field ("messages[2].content") and the message.
struct ChatParseError {
  std::string param, message;
};

// OpenAI's messages array: objects with a role (system, developer, user, assistant) and a content that is a
// string or an array of {"type": "text", "text": ...} parts (an assistant's may be null). Appends to *out;
// returns false and fills *error otherwise.
bool ParseChatMessages(const nlohmann::json& messages, std::vector<ChatMessage>* out, ChatParseError* error);

// The chat template for tern's base models: system messages first, then one line per turn,
//   "<system>\n\nUser: <text>\nAssistant: <text>\nUser: <text>\nAssistant:"
// and generation stops at the next "\nUser:".
std::string ApplyChatTemplate(const std::vector<ChatMessage>& messages);
inline constexpr char kChatStop[] = "\nUser:";

// A conversation as training text: the template's text cut into pieces the model reads (trained = false:
// system, user turns and each "Assistant:") and pieces it learns to write (trained = true: " <reply>\n" of
// every assistant turn). Concatenated and followed by "Assistant:" they are ApplyChatTemplate(messages), so a
// prompt that `tern serve` renders ends exactly where a trained piece begins.
// One line of a --chat training file: {"messages": [...]} with at least one assistant message with text.
// `where` ("chats.jsonl:3") starts the message of a refused line.
Result<std::vector<ChatMessage>> ParseChatLine(std::string_view line, const std::string& where);

struct ChatSegment {
  std::string text;
  bool trained = false;
};
std::vector<ChatSegment> ChatTrainingSegments(const std::vector<ChatMessage>& messages);

}  // namespace tern
