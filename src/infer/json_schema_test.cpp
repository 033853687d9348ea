// response_format json_schema: the compiler's refusals, the schema recognizer against a table per keyword,
// random valid documents from random schemas (accepted byte by byte), random mutations that it calls
// complete (they must parse with nlohmann::json and pass an independent validator), the token trie
// against feeding every token by hand, and the mask's cost per decode step (docs/structured-output.md).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "infer/json_constraint.h"
#include "infer/json_test_util.h"

namespace tern {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> Compile(const std::string& schema) {
  auto r = CompileJsonSchema(ojson::parse(schema), "schema");
  if (auto* e = std::get_if<JsonSchemaError>(&r)) {
    ADD_FAILURE() << schema << ": " << e->message;
    return nullptr;
  }
  return std::get<std::shared_ptr<const JsonSchema>>(r);
}

// The refusal's path, "" when it compiles.
std::string ErrorPath(const std::string& schema) {
  auto r = CompileJsonSchema(ojson::parse(schema), "schema");
  auto* e = std::get_if<JsonSchemaError>(&r);
  return e ? e->path : "";
}

// -1: refused at byte `*at`; 0: a viable prefix; 1: complete.
int Check(const JsonSchema& s, std::string_view text, size_t* at = nullptr) {
  SchemaRecognizer r(&s);
  for (size_t i = 0; i < text.size(); i++)
    if (!r.Feed(static_cast<uint8_t>(text[i]))) {
      if (at) *at = i;
      return -1;
    }
  return r.complete() ? 1 : 0;
}

// The independent validator: `v` against the (subset) schema, as a client would check it.
bool Valid(const json& v, const json& s) {
  if (s.contains("enum")) {
    for (const json& e : s["enum"])
      if (e == v) return true;
    return false;
  }
  const std::string type = s["type"];
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "array") {
    if (!v.is_array() || v.size() < s.value("minItems", 0u) || v.size() > s.value("maxItems", 1000000u))
      return false;
    for (const json& x : v)
      if (!Valid(x, s["items"])) return false;
    return true;
  }
  if (type == "object") {
    if (!v.is_object()) return false;
    const json props = s.value("properties", json::object());
    for (const auto& [k, x] : v.items())
      if (!props.contains(k) || !Valid(x, props[k])) return false;
    for (const json& r : s.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    return true;
  }
  return false;
}

TEST(JsonSchema, RefusesWhatItDoesNotSupportNamingThePath) {
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})"),
            "schema.properties.age.minimum");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"$ref":"#/x"}}})"), "schema.properties.a.$ref");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":"string","pattern":"x"}}})"),
            "schema.properties.a.pattern");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"oneOf":[]}}})"), "schema.properties.a.oneOf");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":["string","null"]}}})"),
            "schema.properties.a.type");
  EXPECT_EQ(ErrorPath(R"({"type":"array","items":{"type":"string"}})"), "schema.type");  // the root
  EXPECT_EQ(ErrorPath(R"({"type":"object","additionalProperties":true})"), "schema.additionalProperties");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})"),
            "schema.required");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":"array"}}})"),
            "schema.properties.a.items");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"enum":[{"x":1}]}}})"),
            "schema.properties.a.enum");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":"string","enum":[1]}}})"),
            "schema.properties.a.enum");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{}}})"), "schema.properties.a");
  EXPECT_EQ(ErrorPath(R"({"type":"object","properties":{"a":{"type":"string","items":{}}}})"),
            "schema.properties.a.items");
  std::string deep = R"({"type":"string"})";
  for (int i = 0; i < JsonSchema::kMaxDepth; i++)
    deep = R"({"type":"object","properties":{"a":)" + deep + "}}";
  EXPECT_EQ(ErrorPath(deep).substr(0, 18), "schema.properties.");  // 33 levels
  auto r = CompileJsonSchema(ojson::parse(R"({"type":"object","format":"x"})"),
                             "response_format.json_schema.schema");
  ASSERT_TRUE(std::holds_alternative<JsonSchemaError>(r));
  const std::string msg = std::get<JsonSchemaError>(r).message;
  EXPECT_NE(msg.find("response_format.json_schema.schema.format is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("supported: type"), std::string::npos) << msg;
  EXPECT_EQ(ErrorPath(R"({"type":"object","title":"t","description":"d","$schema":"x","properties":{}})"),
            "");
}

TEST(SchemaRecognizer, TablePerKeyword) {
  struct Case {
    const char* schema;
    std::vector<const char*> complete, prefix;
    std::vector<std::pair<const char*, size_t>> refused;  // text, the byte refused
  };
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]})",
       {R"({"name":"Al \"x\" \u00e9","age":-12})", R"({"name":"","age":0})"},
       {"", "{", R"({"name":"Al)", R"({"name":"A","age":1)", R"({"name":"A","age":-)"},
       {{R"({"nam":"x")", 5},            // a wrong property name
        {R"({"age":1,"name":"x"})", 2},  // not the listed order
        {R"({"name":5})", 8},            // a number where a string is required
        {R"({"name":"x"})", 11},         // a missing property at '}'
        {R"({"name":"x","age":1.5})", 19},
        {R"({"name":"x","age":1e3})", 19},
        {R"({"name":"x","age":01})", 19},
        {R"({ "name":"x","age":1})", 1},  // no whitespace
        {R"({"name":"x","age":1} )", 20},
        {R"({"name":"x","age":1234567890123456789})", 36}}},
      {R"({"type":"object","properties":{"x":{"type":"number"},"b":{"type":"boolean"},"n":{"type":"null"}}})",
       {R"({"x":-1.5e+10,"b":true,"n":null})", R"({"x":0,"b":false,"n":null})"},
       {R"({"x":1.)", R"({"x":1,"b":fa)"},
       {{R"({"x":"1")", 5}, {R"({"x":1,"b":1)", 11}, {R"({"x":1,"b":true,"n":nul })", 23}}},
      {R"({"type":"object","properties":{"c":{"enum":["red","green",7,7.5,true,null]},"s":{"type":"string","enum":["a","ab"]}}})",
       {R"({"c":"red","s":"ab"})", R"({"c":7,"s":"a"})", R"({"c":7.5,"s":"a"})", R"({"c":true,"s":"a"})",
        R"({"c":null,"s":"a"})"},
       {R"({"c":"gr)", R"({"c":7)", R"({"c":7.)"},
       {{R"({"c":"blue")", 6},  // an enum value not listed
        {R"({"c":"re")", 8},
        {R"({"c":8)", 5},
        {R"({"c":75)", 6},
        {R"({"c":"red","s":"b")", 16},
        {R"({"c":"red","s":"abc")", 18}}},
      {R"({"type":"object","properties":{"t":{"type":"array","items":{"enum":["a","b"]},"minItems":1,"maxItems":2},"e":{"type":"array","items":{"type":"object","properties":{"k":{"type":"integer"}}}}}})",
       {R"({"t":["a"],"e":[]})", R"({"t":["b","a"],"e":[{"k":1},{"k":2}]})"},
       {R"({"t":["a",)", R"({"t":["a"],"e":[{"k":1},)"},
       {{R"({"t":[])", 6},          // minItems 1
        {R"({"t":["a","b",)", 13},  // maxItems 2
        {R"({"t":["a",])", 10},
        {R"({"t":["c"])", 7},
        {R"({"t":["a"],"e":[{}])", 17}}},
      {R"({"type":"object"})", {"{}"}, {"{"}, {{"{\"", 1}}},
  };
  for (const Case& c : cases) {
    auto s = Compile(c.schema);
    ASSERT_TRUE(s) << c.schema;
    for (const char* t : c.complete) {
      EXPECT_EQ(Check(*s, t), 1) << c.schema << "\n" << t;
      EXPECT_TRUE(Valid(json::parse(t), json::parse(c.schema))) << t;
    }
    for (const char* t : c.prefix) EXPECT_EQ(Check(*s, t), 0) << c.schema << "\n" << t;
    for (const auto& [t, want] : c.refused) {
      size_t at = 0;
      EXPECT_EQ(Check(*s, t, &at), -1) << c.schema << "\n" << t;
      EXPECT_EQ(at, want) << t;
    }
  }
}

// Random schemas of the subset and random documents that follow them.
json RandomSchema(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth >= 4 ? 6 : 8));
  switch (kind) {
    case 0:
      return {{"type", "string"}};
    case 1:
      return {{"type", "number"}};
    case 2:
      return {{"type", "integer"}};
    case 3:
      return {{"type", rng() % 2 ? "boolean" : "null"}};
    case 4:
      return {{"type", "string"}, {"enum", {"a", "ab", "b\"c", "\xC3\xA9"}}};
    case 5:
      return {{"enum", {1, 12, -3.5, true, "x", nullptr}}};
    case 6: {
      json a = {{"type", "array"}, {"items", RandomSchema(rng, depth + 1)}};
      if (rng() % 2) a["minItems"] = rng() % 2;
      if (rng() % 2) a["maxItems"] = 1 + rng() % 3;
      return a;
    }
    default:
      break;
  }
  json o = {{"type", "object"}, {"properties", json::object()}};
  const int n = static_cast<int>(rng() % 4);
  for (int i = 0; i < n; i++)
    o["properties"][std::string(1, static_cast<char>('a' + i))] = RandomSchema(rng, depth + 1);
  return o;
}

std::string RandomString(std::mt19937_64& rng) {
  static const std::vector<std::string> parts = {
      "a", "Z", " ", "\\\"", "\\\\", "\\n", "\\u00e9", "\xC3\xA9", "\\ud83d\\ude00", "\xF0\x9F\x98\x80",
      "{", "]"};
  std::string s = "\"";
  for (int n = static_cast<int>(rng() % 6); n > 0; n--) s += parts[rng() % parts.size()];
  return s + "\"";
}

// A document the schema accepts, written compactly with the properties in schema order.
std::string RandomDocument(std::mt19937_64& rng, const ojson& s) {
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()].dump();
  const std::string type = s["type"];
  if (type == "string") return RandomString(rng);
  if (type == "integer") return std::to_string(static_cast<int64_t>(rng() % 2000001) - 1000000);
  if (type == "number") {
    static const char* nums[] = {"0", "-0", "1.5", "-2e10", "3E-2", "12345.678e+3", "7"};
    return nums[rng() % 7];
  }
  if (type == "boolean") return rng() % 2 ? "true" : "false";
  if (type == "null") return "null";
  if (type == "array") {
    const unsigned lo = s.value("minItems", 0u), hi = s.value("maxItems", 4u);
    const unsigned n = lo + rng() % (hi - lo + 1);
    std::string a = "[";
    for (unsigned i = 0; i < n; i++) a += (i ? "," : "") + RandomDocument(rng, s["items"]);
    return a + "]";
  }
  std::string o = "{";
  bool first = true;
  for (const auto& [k, v] : s["properties"].items()) {
    o += (first ? "\"" : ",\"") + k + "\":" + RandomDocument(rng, v);
    first = false;
  }
  return o + "}";
}

TEST(SchemaRecognizer, AcceptsRandomValidDocumentsAndOnlyValidOnes) {
  std::mt19937_64 rng(11);
  int docs = 0, mutants_complete = 0;
  for (int k = 0; k < 150; k++) {
    json schema = RandomSchema(rng, 1);
    if (schema.value("type", "") != "object") schema = {{"type", "object"}, {"properties", {{"v", schema}}}};
    // json (sorted keys) and ordered_json agree on the order: the generator names properties a, b, c...
    auto compiled = Compile(schema.dump());
    ASSERT_TRUE(compiled) << schema.dump();
    for (int d = 0; d < 20; d++, docs++) {
      const std::string doc = RandomDocument(rng, ojson::parse(schema.dump()));
      ASSERT_TRUE(Valid(json::parse(doc), schema)) << doc;
      SchemaRecognizer r(compiled.get());
      for (size_t i = 0; i < doc.size(); i++) {
        ASSERT_FALSE(r.complete()) << doc;
        ASSERT_TRUE(r.Feed(static_cast<uint8_t>(doc[i]))) << schema.dump() << "\n"
                                                          << doc << "\nat byte " << i;
      }
      ASSERT_TRUE(r.complete()) << doc;
      // mutations: delete, insert or replace a byte; whatever the recognizer completes is valid
      static const std::string alphabet = "{}[]\",:0123456789.-+eEtrufalsn \\abxz\xC3\xA9";
      for (int m = 0; m < 30; m++) {
        std::string t = doc;
        const size_t at = rng() % (t.size() + 1);
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            if (at < t.size()) t.erase(at, 1);
            break;
          case 1:
            t.insert(at, 1, c);
            break;
          default:
            if (at < t.size()) t[at] = c;
        }
        SchemaRecognizer mr(compiled.get());
        if (!mr.Feed(t) || !mr.complete()) continue;
        mutants_complete++;
        ASSERT_TRUE(json::accept(t)) << schema.dump() << "\n" << t;
        ASSERT_TRUE(Valid(json::parse(t), schema)) << schema.dump() << "\n" << t;
      }
    }
  }
  std::printf("%d documents accepted, %d complete mutants valid\n", docs, mutants_complete);
  EXPECT_GT(mutants_complete, 100);
}

constexpr const char* kPersonSchema =
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"ok":{"type":"boolean"},)"
    R"("tags":{"type":"array","items":{"enum":["a","b"]}}},"required":["name","age","ok","tags"]})";

// States met while generating: prefixes of documents of the person schema.
std::vector<SchemaRecognizer> SomeStates(const JsonSchema* s, int n) {
  std::mt19937_64 rng(3);
  const ojson schema = ojson::parse(kPersonSchema);
  std::vector<SchemaRecognizer> states;
  while (static_cast<int>(states.size()) < n) {
    const std::string doc = RandomDocument(rng, schema);
    SchemaRecognizer r(s);
    EXPECT_TRUE(r.Feed(std::string_view(doc).substr(0, rng() % doc.size())));
    states.push_back(r);
  }
  return states;
}

TEST(SchemaRecognizer, TrieAllowsExactlyTheTokensThatExtendThePrefix) {
  auto s = Compile(kPersonSchema);
  const std::vector<std::string> vocab = json_test::SyntheticVocab(3000, 1);
  const TokenTrie trie(vocab);
  json_test::ExpectTrieAllowsWhatFeedingAccepts(trie, vocab, SomeStates(s.get(), 200));
  SchemaRecognizer done(s.get());
  ASSERT_TRUE(done.Feed(R"({"name":"x","age":1,"ok":true,"tags":[]})"));
  std::vector<float> logits(3010, 0.0f);
  MaskLogits(trie, done, 2, logits.data(), static_cast<int>(logits.size()));
  for (int i = 0; i < static_cast<int>(logits.size()); i++) EXPECT_EQ(std::isinf(logits[i]), i != 2) << i;
}

// The cost of one sequence's mask per decode step (the figure in docs/structured-output.md).
TEST(SchemaRecognizer, MaskCostPerStep) {
  auto s = Compile(kPersonSchema);
  for (int V : {4096, 50257}) {
    const TokenTrie trie(json_test::SyntheticVocab(V, 4));
    const std::vector<SchemaRecognizer> states = SomeStates(s.get(), 200);
    std::vector<float> logits(V, 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    for (const SchemaRecognizer& st : states) MaskLogits(trie, st, 2, logits.data(), V);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        states.size();
    std::printf(
        "schema mask: vocab %d, %d trie nodes: %.1f us per sequence and step (mean over %zu states)\n", V,
        trie.nodes(), us, states.size());
    EXPECT_LT(us, 50000.0);  // a generous bound: the figure is for the docs, not a benchmark
    // the worst case: inside a string nearly every token is allowed, the whole trie is walked
    SchemaRecognizer in_string(s.get());
    ASSERT_TRUE(in_string.Feed(R"({"name":"ab)"));
    const auto t1 = std::chrono::steady_clock::now();
    for (int k = 0; k < 50; k++) MaskLogits(trie, in_string, 2, logits.data(), V);
    const double us_string =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / 50;
    JsonRecognizer object_in_string;  // json_object's, for comparison
    ASSERT_TRUE(object_in_string.Feed(R"({"name":"ab)"));
    const auto t2 = std::chrono::steady_clock::now();
    for (int k = 0; k < 50; k++) MaskLogits(trie, object_in_string, 2, logits.data(), V);
    std::printf(
        "inside a string: vocab %d: schema %.1f us, json_object %.1f us per sequence and step\n", V,
        us_string,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t2).count() / 50);
  }
}

}  // namespace
}  // namespace tern
