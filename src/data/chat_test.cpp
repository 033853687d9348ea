// The chat convention tern serve and tern prepare --chat share: the template, the training segments (the
// prompt tern serve renders for any turn ends exactly where a trained piece begins), and the line parser.
#include "data/chat.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

std::vector<ChatMessage> Conversation() {
  return {{"system", "Be brief."},
          {"user", "Who made light?"},
          {"assistant", "God."},
          {"user", "And the waters?"},
          {"assistant", "God too."}};
}

TEST(Chat, TemplateIsOneLinePerTurnAfterTheSystem) {
  EXPECT_EQ(
      ApplyChatTemplate(Conversation()),
      "Be brief.\n\nUser: Who made light?\nAssistant: God.\nUser: And the waters?\nAssistant: God too.\n"
      "Assistant:");
  EXPECT_EQ(ApplyChatTemplate({{"user", "Hi"}}), "User: Hi\nAssistant:");
}

TEST(Chat, TrainingSegmentsLearnTheRepliesAndMatchEveryServedPrompt) {
  const auto msgs = Conversation();
  const auto seg = ChatTrainingSegments(msgs);
  ASSERT_EQ(seg.size(), 4u);
  EXPECT_EQ(seg[0].text, "Be brief.\n\nUser: Who made light?\nAssistant:");
  EXPECT_FALSE(seg[0].trained);
  EXPECT_EQ(seg[1].text, " God.\n");
  EXPECT_TRUE(seg[1].trained);
  EXPECT_EQ(seg[2].text, "User: And the waters?\nAssistant:");
  EXPECT_EQ(seg[3].text, " God too.\n");
  // The prompt tern serve renders for the k-th reply is the text of the segments before it.
  std::string before;
  int reply = 0;
  for (size_t i = 0; i < seg.size(); i++) {
    if (seg[i].trained) {
      std::vector<ChatMessage> prompt;
      int replies = 0;
      for (const auto& m : msgs) {
        if (m.role == "assistant" && replies++ == reply) break;
        prompt.push_back(m);
      }
      EXPECT_EQ(before, ApplyChatTemplate(prompt)) << "reply " << reply;
      reply++;
    }
    before += seg[i].text;
  }
  // A trailing user turn is read, not learned.
  auto tail = ChatTrainingSegments({{"user", "a"}, {"assistant", "b"}, {"user", "c"}});
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[2].text, "User: c\n");
  EXPECT_FALSE(tail[2].trained);
}

TEST(Chat, LinesAreRefusedWithWhereAndWhy) {
  auto ok = ParseChatLine(
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})",
      "c.jsonl:1");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->size(), 2u);
  for (const auto& [line, says] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "not a JSON object"},
           {R"({"conversation": []})", "no \"messages\""},
           {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role"},
           {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
           // fuzz/chat_jsonl found it: a content part whose type is not a string threw from nlohmann's
           // value()
           {R"({"messages": [{"role": "user", "content": [{"type": [{"type": "text", "text": "a"}]}]}]})",
            "only text content parts"},
           {R"({"messages": [{"role": "user", "content": "Hi"}]})", "no assistant message with text"},
           {R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]})",
            "no assistant message with text"}}) {
    auto r = ParseChatLine(line, "c.jsonl:7");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.status().message().find("c.jsonl:7: "), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tern
