// The JSON recognizer against a table and against nlohmann::json (an independent parser), the token trie
// against feeding every token by hand, and the mask's cost per decode step (printed;
// docs/structured-output.md).
#include "infer/json_constraint.h"
#include "infer/json_test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

namespace tern {
namespace {

using json = nlohmann::json;

// -1: refused at some byte; 0: a viable prefix; 1: a complete object.
int Check(std::string_view s) {
  JsonRecognizer r;
  if (!r.Feed(s)) return -1;
  return r.complete() ? 1 : 0;
}

TEST(JsonRecognizer, Table) {
  for (const char* s :
       {R"({})", R"( {"a":1})", R"({"a":[1,-2.5e+3,0.0,-0,1E9,true,false,null]})",
        R"({"k":{"n":{"m":[[],{}]}}})", R"({"s":"esc \" \\ \/ \b \f \n \r \t \u00e9"})",
        R"({"pair":"\ud83d\ude00", "low case":"\uD83D\uDE00"})",
        "{\"utf8\":\"h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"}", "{\n  \"a\" :\t1 ,\r\n \"b\": [ 1 , 2 ] }"})
    EXPECT_EQ(Check(s), 1) << s;
  for (const char* s : {"", " ", "{", R"({"a)", R"({"a":)", R"({"a":-)", R"({"a":1.)", R"({"a":1e)",
                        R"({"a":1e-)", R"({"a":tr)", R"({"a":"\u12)", R"({"a":"\ud83d)", R"({"a":"\ud83d\)",
                        R"({"a":[1,)", R"({"a":0)", "{\"a\":\"\xE2\x82"})
    EXPECT_EQ(Check(s), 0) << s;
  for (const char* s : {R"([])",
                        R"("a")",
                        R"(1)",
                        R"({}})",
                        R"({} )",
                        R"({,})",
                        R"({"a"})",
                        R"({"a":1,})",
                        R"({"a":[1,]})",
                        R"({"a":01})",
                        R"({"a":1.e2})",
                        R"({"a":.5})",
                        R"({"a":+1})",
                        R"({"a":tru })",
                        R"({"a":True})",
                        R"({"a":"\x"})",
                        R"({"a":"\u12g4"})",
                        R"({"a":"\udc00"})",
                        R"({"a":"\ud83dx"})",
                        R"({"a":"\ud83d\u0041"})",
                        R"({"a":[}})",
                        R"({"a":{]})",
                        R"({'a':1})",
                        R"({"a":1 2})",
                        "{\"a\":\"tab\there\"}",
                        "{\"a\":\"\xC0\xAF\"}",
                        "{\"a\":\"\xED\xA0\x80\"}",
                        "{\"a\":\"\xF5\"}",
                        "{\"a\":\"\xE2\x28\"}",
                        "{         }",
                        R"({"a":1e400})",
                        R"({"a":1e123})"})
    EXPECT_EQ(Check(s), -1) << s;
}

TEST(JsonRecognizer, Limits) {
  std::string deep;
  for (int i = 0; i < JsonRecognizer::kMaxDepth; i++) deep += i == 0 ? "{\"a\":" : "[";
  EXPECT_EQ(Check(deep), 0);
  EXPECT_EQ(Check(deep + "["), -1);
  EXPECT_EQ(Check("{\"a\":" + std::string(JsonRecognizer::kMaxMantissaDigits, '7') + "}"), 1);
  EXPECT_EQ(Check("{\"a\":" + std::string(JsonRecognizer::kMaxMantissaDigits + 1, '7') + "}"), -1);
}

// Random JSON objects: nested containers, strings with escapes and UTF-8, integers and finite doubles.
json RandomValue(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth >= 4 ? 6 : 8));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int64_t>(rng() % 2000000) - 1000000;
    case 3:
      return std::ldexp(static_cast<double>(rng() % 100000) - 50000, static_cast<int>(rng() % 40) - 20);
    case 4:
    case 5: {
      static const char* pieces[] = {"a",   "Z",   " ",    "\"",       "\\",           "/",
                                     "\n",  "\t",  "\x01", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80",
                                     "key", "\x7F"};
      std::string s;
      for (int i = static_cast<int>(rng() % 6); i > 0; i--) s += pieces[rng() % std::size(pieces)];
      return s;
    }
    case 6: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; i--) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; i--)
        o["k" + std::to_string(rng() % 10)] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

std::vector<std::string> Corpus() {
  std::mt19937_64 rng(11);
  std::vector<std::string> docs = {R"({"e":"\ud83d\ude00\u0000\u001f\uFFFF"})",
                                   R"({"n":[-0.0,1e-99,12E+34]})"};
  for (int i = 0; i < 600; i++) {
    json o = json::object();
    for (int k = static_cast<int>(rng() % 5); k > 0; k--) o["f" + std::to_string(k)] = RandomValue(rng, 1);
    docs.push_back(o.dump());
    docs.push_back(o.dump(1));              // newline + one space per level: within the whitespace bound
    docs.push_back(o.dump(-1, ' ', true));  // non-ASCII as \u escapes (surrogate pairs)
  }
  return docs;
}

// Every valid object of the corpus is accepted byte by byte and complete only at its end.
TEST(JsonRecognizer, AcceptsTheCorpus) {
  for (const std::string& doc : Corpus()) {
    ASSERT_TRUE(json::accept(doc)) << doc;
    JsonRecognizer r;
    for (size_t i = 0; i < doc.size(); i++) {
      ASSERT_FALSE(r.complete()) << doc;
      ASSERT_TRUE(r.Feed(static_cast<uint8_t>(doc[i]))) << "byte " << i << " of " << doc;
    }
    EXPECT_TRUE(r.complete()) << doc;
  }
}

// Whitespace runs and exponents within the recognizer's limits (conservatively: strings are not told apart).
bool WithinLimits(const std::string& s) {
  static const std::regex kLongExponent("[eE][+-]?[0-9]{3}");
  int run = 0;
  for (char c : s) {
    run = c == ' ' || c == '\t' || c == '\n' || c == '\r' ? run + 1 : 0;
    if (run > JsonRecognizer::kMaxWhitespace) return false;
  }
  // nothing after the object: the recognizer then allows only the end-of-text token
  return !std::regex_search(s, kLongExponent) && s.back() == '}';
}

// Mutated documents and random byte strings: whatever the recognizer calls complete nlohmann parses as an
// object, and whatever nlohmann parses as an object (within the limits) the recognizer calls complete.
TEST(JsonRecognizer, AgreesWithNlohmannOnMutations) {
  std::mt19937_64 rng(5);
  const std::vector<std::string> corpus = Corpus();
  const std::string alphabet = "{}[]\":,\\u0123456789abcdefnrtulsE.+- \n\tDdCc\x80\xBF\xC3\xED\xF0\xFF\x01";
  int complete = 0, agreed_invalid = 0;
  for (int it = 0; it < 200000; it++) {
    std::string s;
    if (it % 4 == 3) {
      s = "{";
      for (int i = static_cast<int>(rng() % 24); i > 0; i--) s += alphabet[rng() % alphabet.size()];
    } else {
      s = corpus[rng() % corpus.size()];
      for (int m = 1 + static_cast<int>(rng() % 3); m > 0 && !s.empty(); m--) {
        const size_t at = rng() % s.size();
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            s[at] = c;
            break;
          case 1:
            s.insert(s.begin() + at, c);
            break;
          default:
            s.erase(at, 1);
        }
      }
    }
    const int got = Check(s);
    const bool object = json::accept(s) && json::parse(s).is_object();
    if (got == 1) {
      complete++;
      EXPECT_TRUE(object) << "the recognizer accepts what nlohmann does not: " << s;
    } else if (object && WithinLimits(s)) {
      ADD_FAILURE() << "nlohmann accepts an object the recognizer refuses: " << s;
    } else {
      agreed_invalid++;
    }
  }
  EXPECT_GT(complete, 15000);
  EXPECT_GT(agreed_invalid, 15000);
}

// States met while generating: prefixes of corpus documents.
std::vector<JsonRecognizer> SomeStates(int n) {
  std::mt19937_64 rng(3);
  const std::vector<std::string> corpus = Corpus();
  std::vector<JsonRecognizer> states;
  while (static_cast<int>(states.size()) < n) {
    const std::string& doc = corpus[rng() % corpus.size()];
    JsonRecognizer r;
    EXPECT_TRUE(r.Feed(std::string_view(doc).substr(0, rng() % doc.size())));
    states.push_back(r);
  }
  return states;
}

TEST(TokenTrie, AllowsExactlyTheTokensThatExtendThePrefix) {
  const std::vector<std::string> vocab = json_test::SyntheticVocab(3000, 1);
  const TokenTrie trie(vocab);
  json_test::ExpectTrieAllowsWhatFeedingAccepts(trie, vocab, SomeStates(300));
}

TEST(TokenTrie, MaskLeavesOnlyEosOnceComplete) {
  const TokenTrie trie(json_test::SyntheticVocab(500, 2));
  JsonRecognizer r;
  ASSERT_TRUE(r.Feed("{\"a\":1}"));
  std::vector<float> logits(510, 0.0f);  // a model vocabulary padded past the tokenizer's
  MaskLogits(trie, r, 2, logits.data(), static_cast<int>(logits.size()));
  for (int i = 0; i < static_cast<int>(logits.size()); i++) EXPECT_EQ(std::isinf(logits[i]), i != 2) << i;
}

// The cost of one sequence's mask per decode step (the figure in docs/structured-output.md).
TEST(TokenTrie, MaskCostPerStep) {
  for (int V : {4096, 50257}) {
    const TokenTrie trie(json_test::SyntheticVocab(V, 4));
    const std::vector<JsonRecognizer> states = SomeStates(200);
    std::vector<float> logits(V, 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    for (const JsonRecognizer& s : states) MaskLogits(trie, s, 2, logits.data(), V);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        states.size();
    std::printf("mask: vocab %d, %d trie nodes: %.1f us per sequence and step (mean over %zu states)\n", V,
                trie.nodes(), us, states.size());
    EXPECT_LT(us, 50000.0);  // a generous bound: the figure is for the docs, not a benchmark
  }
}

}  // namespace
}  // namespace tern
