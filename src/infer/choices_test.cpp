// The multiple-choice file format (`tern eval --choices`): HellaSwag's lines as they are, the other field
// names, quoted labels, and every malformed line refused with its line number and what to write instead.
#include "infer/choices.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(ChoiceItems, HellaSwagLinesAndOtherFieldNamesParse) {
  const std::string text =
      R"({"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx": "A man is sitting on a roof. he", "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "label": 3, "split": "val"})"
      "\n\n"
      R"({"question": "2 + 2 =", "choices": ["4", "5"], "answer": 0})"
      "\r\n"
      R"({"context": "", "choices": ["a", "b", "c"], "gold": "2"})"
      "\n";
  auto items = ParseChoiceItems(text, "set.jsonl");
  ASSERT_TRUE(items.ok()) << items.status().ToString();
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ((*items)[0].context, "A man is sitting on a roof. he");
  ASSERT_EQ((*items)[0].endings.size(), 4u);
  EXPECT_EQ((*items)[0].endings[3], "starts pulling up roofing on a roof.");
  EXPECT_EQ((*items)[0].label, 3);
  EXPECT_EQ((*items)[1].context, "2 + 2 =");
  EXPECT_EQ((*items)[1].label, 0);
  EXPECT_EQ((*items)[2].context, "");
  EXPECT_EQ((*items)[2].label, 2) << "a label of digits in quotes";
}

TEST(ChoiceItems, MalformedLinesAreRefusedWithTheLineAndTheFix) {
  struct Case {
    std::string line, want;
  };
  const Case cases[] = {
      {R"({"ctx": "a", "endings": ["x", "y"], "label": 2})", "index of the right ending, 0 to 1"},
      {R"({"ctx": "a", "endings": ["x", "y"], "label": -1})", "no valid label"},
      {R"({"ctx": "a", "endings": ["x", "y"], "label": "B"})", "no valid label"},
      {R"({"ctx": "a", "endings": ["x", "y"]})", "no valid label"},
      {R"({"ctx": "a", "endings": ["x"], "label": 0})", "two or more"},
      {R"({"ctx": "a", "endings": ["x", ""], "label": 0})", "non-empty string"},
      {R"({"ctx": "a", "endings": ["x", 3], "label": 0})", "non-empty string"},
      {R"({"ctx": 5, "endings": ["x", "y"], "label": 0})", "no context"},
      {R"({"endings": ["x", "y"], "label": 0})", "no context"},
      {R"(["ctx", "endings"])", "not a JSON object"},
      {R"({"ctx": "a", "endings": ["x", "y"], "label": 0)", "not JSON"},
  };
  for (const Case& c : cases) {
    const std::string text = R"({"ctx": "ok", "endings": ["x", "y"], "label": 1})"
                             "\n" +
                             c.line + "\n";
    auto items = ParseChoiceItems(text, "set.jsonl");
    ASSERT_FALSE(items.ok()) << c.line;
    EXPECT_EQ(items.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(items.status().message().find("set.jsonl line 2"), std::string::npos)
        << items.status().ToString();
    EXPECT_NE(items.status().message().find(c.want), std::string::npos) << items.status().ToString();
  }
  auto empty = ParseChoiceItems("\n  \n", "set.jsonl");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("holds no item"), std::string::npos);
  auto missing = LoadChoiceItems("/nonexistent/set.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--choices"), std::string::npos);
}

}  // namespace
}  // namespace tern
