// Structured output: the completion constrained to one JSON object (response_format json_object) or to
// one document of a schema (json_schema; docs/structured-output.md). Three pieces:
//
//  * JsonRecognizer, an incremental pushdown recognizer over bytes (RFC 8259, top-level value an object).
//    It accepts exactly the viable prefixes: a byte is refused iff no completion of the prefix with it is
//    a JSON object within the limits below. Its state is 24 bytes, copied freely.
//  * SchemaRecognizer: the same for a compiled schema (json_schema.h), reading strings and numbers
//    through a JsonRecognizer.
//  * TokenTrie, the vocabulary's byte strings in a trie, built once per model. Per decode step MaskLogits
//    walks it depth first from the sequence's recognizer state (shared prefixes are fed once) and sets the
//    logit of every token that cannot extend the prefix to -inf; once the object is complete only the
//    end-of-text token is left.
//
// Limits (a model must not loop where JSON has no bound; all are viable: a prefix can always be finished):
// at most kMaxWhitespace consecutive whitespace bytes, kMaxDepth nested containers, kMaxMantissaDigits
// digits before the exponent and kMaxExponentDigits in it (so every number is a finite double, as
// nlohmann::json requires). Strings must be valid UTF-8 and \u escapes proper surrogate pairs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "data/tokenizer.h"
#include "infer/json_schema.h"

namespace tern {

class JsonRecognizer {
 public:
  static constexpr int kMaxWhitespace = 8;
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxMantissaDigits = 64;
  static constexpr int kMaxExponentDigits = 2;

  // Appends a byte; false when the prefix cannot be extended with it (the state is then dead: refuses all).
  bool Feed(uint8_t c);
  bool Feed(std::string_view bytes) {
    for (char c : bytes)
      if (!Feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  // The bytes so far are one complete JSON object (nothing may follow).
  bool complete() const { return mode_ == kDone; }

  // For SchemaRecognizer's strings and numbers: a recognizer of one top-level value of any type (complete()
  // once a string or literal is closed; a number never completes: the byte after it ends it).
  static JsonRecognizer Value() {
    JsonRecognizer r;
    r.mode_ = kValue;
    return r;
  }
  // The bytes so far are a number that may end here.
  bool number_may_end() const {
    return mode_ == kNumZero || mode_ == kNumInt || mode_ == kNumFrac || mode_ == kNumExp;
  }

 private:
  enum Mode : uint8_t {
    kStart,     // before the object: whitespace or '{'
    kObjFirst,  // after '{': whitespace, a key or '}'
    kObjKey,    // after ',' in an object: whitespace or a key
    kColon,     // after a key: whitespace or ':'
    kArrFirst,  // after '[': whitespace, a value or ']'
    kValue,     // after ':', or ',' in an array: whitespace or a value
    kAfter,     // after a value in a container: whitespace, ',' or the closer
    kString,
    kEscape,  // after a backslash
    kHex,     // in \uXXXX, count_ digits read
    kUtf8,    // in a multi-byte character, count_ continuation bytes to go, the next in [lo_, hi_]
    kNumMinus,
    kNumZero,
    kNumInt,
    kNumDot,
    kNumFrac,
    kNumE,
    kNumESign,
    kNumExp,
    kLiteral,  // in true/false/null: literal lit_, count_ bytes matched
    kDone,
    kDead,
  };
  bool Fail() {
    mode_ = kDead;
    return false;
  }
  bool Whitespace();
  bool Open(bool array);
  bool Close(uint8_t c);
  bool StartValue(uint8_t c);
  bool EndNumber(uint8_t c);
  bool InString(uint8_t c);
  bool InHex(uint8_t c);
  bool top_is_array() const { return (stack_ >> (depth_ - 1)) & 1; }

  uint64_t stack_ = 0;  // bit d - 1: the container at depth d is an array
  uint16_t hex_ = 0;    // the \u escape's value so far
  uint8_t mode_ = kStart;
  uint8_t depth_ = 0;  // open containers
  uint8_t ws_ = 0;     // consecutive whitespace bytes
  uint8_t count_ = 0;  // digits, hex digits, literal bytes or continuation bytes (by mode)
  uint8_t lit_ = 0;    // which literal
  uint8_t lo_ = 0, hi_ = 0;
  bool key_ = false;       // the string being read is a key
  bool want_low_ = false;  // a high surrogate was escaped: the next bytes must escape a low one
};

// response_format json_schema: the bytes of one JSON document that the schema (json_schema.h) accepts,
// written compactly: no whitespace between tokens, an object's properties all present in the schema's order,
// names and enum values byte for byte as compact JSON. Strings and numbers are read by a JsonRecognizer
// (its limits apply; an integer has at most JsonSchema::kMaxIntDigits digits). Like JsonRecognizer it
// accepts exactly the viable prefixes. The state is a fixed stack of (node, position) frames; copies copy
// the frames in use only (memcpy: the class stays standard layout and trivially copyable in substance).
class SchemaRecognizer {
 public:
  SchemaRecognizer() = default;  // refuses everything (no schema)
  explicit SchemaRecognizer(const JsonSchema* schema) : schema_(schema) {
    depth_ = 1;
    frames_[0] = Frame{0, 0, 0};
  }
  SchemaRecognizer(const SchemaRecognizer& o) { CopyFrom(o); }
  SchemaRecognizer& operator=(const SchemaRecognizer& o) {
    CopyFrom(o);
    return *this;
  }

  bool Feed(uint8_t c);
  bool Feed(std::string_view bytes) {
    for (char c : bytes)
      if (!Feed(static_cast<uint8_t>(c))) return false;
    return true;
  }
  bool complete() const { return done_; }

 private:
  struct Frame {
    uint16_t node;
    uint16_t i;    // object: the next property; array: items so far; integer: digits so far
    uint16_t pos;  // object: bytes of segments[i] read; array: phase; number: 1 once started;
                   // enum: bytes read
  };
  bool Fail() {
    depth_ = 0;
    done_ = false;
    in_string_ = false;
    return false;
  }
  bool Push(int node) {
    if (depth_ >= JsonSchema::kMaxDepth) return Fail();  // the compiler refuses deeper schemas
    frames_[depth_++] = Frame{static_cast<uint16_t>(node), 0, 0};
    return true;
  }
  void Pop() {
    if (--depth_ == 0) done_ = true;
  }
  void CopyFrom(const SchemaRecognizer& o) {  // the members before frames_, then the frames in use
    std::memcpy(static_cast<void*>(this), &o, offsetof(SchemaRecognizer, frames_) + o.depth_ * sizeof(Frame));
  }

  const JsonSchema* schema_ = nullptr;
  JsonRecognizer lex_;  // the string or number being read (the top frame's)
  uint64_t enum_ = 0;   // the top enum frame's values still matching
  uint8_t depth_ = 0;
  bool done_ = false;
  bool in_string_ = false;  // the top frame is a string being read (the fast path)
  Frame frames_[JsonSchema::kMaxDepth];
};
// CopyFrom's memcpy up to offsetof(frames_) needs both: a member that is not trivially copyable, or a layout
// that is not standard, would be copied wrongly without a word.
static_assert(std::is_standard_layout_v<SchemaRecognizer>, "SchemaRecognizer::CopyFrom copies by offsetof");
static_assert(std::is_trivially_copyable_v<JsonRecognizer>, "SchemaRecognizer::CopyFrom memcpys its lex_");

class TokenTrie {
 public:
  // token_bytes[id]: the bytes token id adds to the text; empty = never allowed (control tokens).
  explicit TokenTrie(const std::vector<std::string>& token_bytes);
  // The tokenizer's byte strings: byte pieces are their byte, other pieces their decoded text; unk, bos
  // and eos are empty.
  static TokenTrie FromTokenizer(const Tokenizer& tok);

  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  int nodes() const { return static_cast<int>(nodes_.size()); }

  // allowed[id] = 1 for every token id < vocab_size() whose bytes extend `state` (the rest untouched).
  // Returns how many. State: JsonRecognizer or SchemaRecognizer.
  template <class State>
  int Allowed(const State& state, uint8_t* allowed) const;

 private:
  struct Node {
    int32_t end;                 // one past the last node of its subtree (preorder)
    int32_t tok_begin, tok_end;  // its tokens in tokens_
    int32_t depth;               // bytes from the root (1 for the root's children)
    uint8_t byte;
  };
  std::vector<std::string> bytes_;
  std::vector<Node> nodes_;  // preorder, without the root
  std::vector<int32_t> tokens_;
  int max_len_ = 0;
};

// Sets logits[id] = -inf for every id < V that `state` does not allow. When the object is complete (or,
// which a vocabulary with byte tokens never gives, nothing is allowed) only `eos` stays.
void MaskLogits(const TokenTrie& trie, const JsonRecognizer& state, int32_t eos, float* logits, int V);
void MaskLogits(const TokenTrie& trie, const SchemaRecognizer& state, int32_t eos, float* logits, int V);

}  // namespace tern
