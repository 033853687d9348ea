// Inputs the serve fuzzers (fuzz/README.md) found that crashed a parser: openai_request's must now be a 400,
// api_keys's an error naming the file and line.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "serve/api.h"
#include "serve/api_keys.h"

namespace tern {
namespace {

// A number too large for a double ("1e400") made nlohmann throw out_of_range, which the parse_error handler
// did not catch: the HTTP thread died and took `tern serve` with it. The tokenizer is never reached.
TEST(FuzzRegression, OpenaiRequestNumberOverflow) {
  const ApiContext ctx{"tiny", nullptr, 128};
  for (const char* body :
       {R"({"prompt":"x","max_tokens":922337204311e308})", R"([1e400])", R"({"n":-1e999})"}) {
    for (bool chat : {false, true}) {
      auto r = ParseRequest(body, chat, ctx);
      ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
      EXPECT_EQ(std::get<ApiError>(r).status, 400) << body;
      EXPECT_NE(std::get<ApiError>(r).message.find("not valid JSON"), std::string::npos)
          << std::get<ApiError>(r).message;
    }
  }
}

// api_keys: a field name that is a list or a mapping (the fuzzer's own, `? oject: ...` in an entry), or a
// key that is a list, made yaml-cpp's as<std::string>() throw out of LoadApiKeys: `tern serve --api-keys`
// died of an uncaught YAML::TypedBadConversion instead of saying which line was wrong.
TEST(FuzzRegression, ApiKeysFieldNameOrKeyThatIsAListOrMapping) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {
           Case{"keys:\n  - id: search-prod\n    key: sk-search-0123456789\n    ? oject: "
                "searckens_per_miads\n",
                "keys.yaml:4: a field name must be a plain word"},
           Case{"keys:\n  - {id: a, [key]: sk-aaaaaaaaaa, project: p}\n",
                "a field name must be a plain word"},
           Case{"keys:\n  - {id: a, key: [sk-aaaaaaaaaa], project: p}\n",
                "'key' of 'a' must be text, not a list or a mapping"},
           Case{"keys:\n  - id: a\n    key_env: {HOME: 1}\n    project: p\n",
                "keys.yaml:3: 'key_env' of 'a' must be text"},
       }) {
    auto keys = ParseApiKeys(c.text, "keys.yaml");
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_NE(keys.status().message().find(c.says), std::string::npos) << keys.status().message();
    EXPECT_EQ(keys.status().message().find("sk-aaaaaaaaaa"), std::string::npos) << "a key in an error";
  }
}

}  // namespace
}  // namespace tern
