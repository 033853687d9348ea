// Chat fine-tuning lines (`tern prepare --chat`): ParseChatLine, then the training segments of what it
// accepts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "data/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  auto messages = tern::ParseChatLine(line, "/fuzz/chats.jsonl:1");
  if (!messages.ok()) return 0;
  // What it promises: an assistant message with text; the segments, followed by "Assistant:", are the
  // template's text, with at least one trained piece.
  std::string text;
  bool trained = false;
  for (const tern::ChatSegment& s : tern::ChatTrainingSegments(*messages)) {
    text += s.text;
    trained = trained || s.trained;
  }
  if (!trained || text + "Assistant:" != tern::ApplyChatTemplate(*messages)) __builtin_trap();
  return 0;
}
