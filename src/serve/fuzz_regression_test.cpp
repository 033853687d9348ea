// Inputs the openai_request fuzzer (fuzz/README.md) found that crashed ParseRequest: each must now be a 400.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "serve/api.h"

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

}  // namespace
}  // namespace tern
