#include "infer/json_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace tern {
namespace {

constexpr const char* kLiterals[] = {"true", "false", "null"};

bool IsWhitespace(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool IsDigit(uint8_t c) {
  return c >= '0' && c <= '9';
}
int HexValue(uint8_t c) {
  if (IsDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool JsonRecognizer::Whitespace() {
  if (ws_ >= kMaxWhitespace) return Fail();
  ws_++;
  return true;
}

bool JsonRecognizer::Open(bool array) {
  if (depth_ >= kMaxDepth) return Fail();
  const uint64_t bit = uint64_t{1} << depth_;
  stack_ = array ? stack_ | bit : stack_ & ~bit;
  depth_++;
  mode_ = array ? kArrFirst : kObjFirst;
  return true;
}

bool JsonRecognizer::Close(uint8_t c) {
  if (c != (top_is_array() ? ']' : '}')) return Fail();
  depth_--;
  mode_ = depth_ == 0 ? kDone : kAfter;
  return true;
}

bool JsonRecognizer::StartValue(uint8_t c) {
  count_ = 0;
  switch (c) {
    case '{':
      return Open(false);
    case '[':
      return Open(true);
    case '"':
      mode_ = kString;
      key_ = false;
      return true;
    case '-':
      mode_ = kNumMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      mode_ = kLiteral;
      lit_ = c == 't' ? 0 : c == 'f' ? 1 : 2;
      count_ = 1;
      return true;
    default:
      if (!IsDigit(c)) return Fail();
      mode_ = c == '0' ? kNumZero : kNumInt;
      count_ = 1;
      return true;
  }
}

// A byte that cannot continue the number ends it (when it may end there) and is read after it.
bool JsonRecognizer::EndNumber(uint8_t c) {
  if (mode_ == kNumMinus || mode_ == kNumDot || mode_ == kNumE || mode_ == kNumESign) return Fail();
  if (depth_ == 0) return Fail();  // Value(): nothing follows the value
  mode_ = kAfter;
  ws_ = 0;
  return Feed(c);
}

bool JsonRecognizer::InString(uint8_t c) {
  if (want_low_ && c != '\\') return Fail();
  if (c == '"') {
    mode_ = key_ ? kColon : depth_ == 0 ? kDone : kAfter;
    ws_ = 0;
    return true;
  }
  if (c == '\\') {
    mode_ = kEscape;
    return true;
  }
  if (c < 0x20) return Fail();  // control characters must be escaped
  if (c < 0x80) return true;
  // UTF-8 (RFC 3629): the lead byte fixes the length and the range of the first continuation byte, which
  // rules out overlong forms, surrogates and code points above U+10FFFF.
  lo_ = 0x80, hi_ = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    count_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    count_ = 2;
    if (c == 0xE0) lo_ = 0xA0;
    if (c == 0xED) hi_ = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    count_ = 3;
    if (c == 0xF0) lo_ = 0x90;
    if (c == 0xF4) hi_ = 0x8F;
  } else {
    return Fail();
  }
  mode_ = kUtf8;
  return true;
}

// \uXXXX: refused as soon as no completion of the digits read is allowed here (a low surrogate must follow
// a high one, and only follow one).
bool JsonRecognizer::InHex(uint8_t c) {
  const int d = HexValue(c);
  if (d < 0) return Fail();
  hex_ = static_cast<uint16_t>(hex_ * 16 + d);
  count_++;
  const int shift = 4 * (4 - count_);
  const uint32_t lo = static_cast<uint32_t>(hex_) << shift, hi = lo | ((1u << shift) - 1);
  if (want_low_ ? (hi < 0xDC00 || lo > 0xDFFF) : (lo >= 0xDC00 && hi <= 0xDFFF)) return Fail();
  if (count_ < 4) return true;
  want_low_ = !want_low_ && hex_ >= 0xD800 && hex_ <= 0xDBFF;
  mode_ = kString;
  return true;
}

bool JsonRecognizer::Feed(uint8_t c) {
  switch (mode_) {
    case kStart:
    case kObjFirst:
    case kObjKey:
    case kColon:
    case kArrFirst:
    case kValue:
    case kAfter:
      if (IsWhitespace(c)) return Whitespace();
      ws_ = 0;
      break;
    default:
      break;
  }
  switch (mode_) {
    case kStart:
      return c == '{' ? Open(false) : Fail();
    case kObjFirst:
      if (c == '}') return Close(c);
      [[fallthrough]];
    case kObjKey:
      if (c != '"') return Fail();
      mode_ = kString;
      key_ = true;
      return true;
    case kColon:
      if (c != ':') return Fail();
      mode_ = kValue;
      return true;
    case kArrFirst:
      if (c == ']') return Close(c);
      return StartValue(c);
    case kValue:
      return StartValue(c);
    case kAfter:
      if (c == ',') {
        mode_ = top_is_array() ? kValue : kObjKey;
        return true;
      }
      return Close(c);
    case kString:
      return InString(c);
    case kEscape:
      if (c == 'u') {
        mode_ = kHex;
        count_ = 0;
        hex_ = 0;
        return true;
      }
      if (want_low_) return Fail();
      if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't')
        return Fail();
      mode_ = kString;
      return true;
    case kHex:
      return InHex(c);
    case kUtf8:
      if (c < lo_ || c > hi_) return Fail();
      lo_ = 0x80, hi_ = 0xBF;
      if (--count_ == 0) mode_ = kString;
      return true;
    case kNumMinus:
      if (!IsDigit(c)) return Fail();
      mode_ = c == '0' ? kNumZero : kNumInt;
      count_ = 1;
      return true;
    case kNumZero:
    case kNumInt:
    case kNumFrac:
      if (IsDigit(c) && mode_ != kNumZero) {
        if (count_ >= kMaxMantissaDigits) return Fail();
        count_++;
        return true;
      }
      if (c == '.' && mode_ != kNumFrac) {
        mode_ = kNumDot;
        return true;
      }
      if (c == 'e' || c == 'E') {
        mode_ = kNumE;
        return true;
      }
      return EndNumber(c);
    case kNumDot:
      if (!IsDigit(c) || count_ >= kMaxMantissaDigits) return Fail();
      count_++;
      mode_ = kNumFrac;
      return true;
    case kNumE:
      if (c == '+' || c == '-') {
        mode_ = kNumESign;
        return true;
      }
      [[fallthrough]];
    case kNumESign:
      if (!IsDigit(c)) return Fail();
      mode_ = kNumExp;
      count_ = 1;
      return true;
    case kNumExp:
      if (IsDigit(c)) {
        if (count_ >= kMaxExponentDigits) return Fail();
        count_++;
        return true;
      }
      return EndNumber(c);
    case kLiteral: {
      const char* lit = kLiterals[lit_];
      if (c != static_cast<uint8_t>(lit[count_])) return Fail();
      if (lit[++count_] == '\0') {
        mode_ = depth_ == 0 ? kDone : kAfter;
        ws_ = 0;
      }
      return true;
    }
    default:  // kDone, kDead
      return Fail();
  }
}

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(bytes_.size()); id++)
    if (!bytes_[id].empty()) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes_[a] < bytes_[b]; });
  // Sorted strings give the preorder: each adds the nodes of its bytes beyond the common prefix with the
  // previous one. path[d] is the node of the current string's first d + 1 bytes.
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (prev)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) common++;
    path.resize(common);
    for (size_t d = common; d < s.size(); d++) {
      path.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(Node{0, 0, 0, static_cast<int32_t>(d + 1), static_cast<uint8_t>(s[d])});
    }
    tokens_.push_back(id);  // tokens_ is in node order: the string's node is the last one created so far
    Node& n = nodes_[path.back()];
    if (n.tok_end == 0) n.tok_begin = static_cast<int32_t>(tokens_.size()) - 1;
    n.tok_end = static_cast<int32_t>(tokens_.size());
    max_len_ = std::max(max_len_, static_cast<int>(s.size()));
    prev = &s;
  }
  // end: the next node at the same or a smaller depth.
  std::vector<int32_t> open;
  for (int32_t i = 0; i < static_cast<int32_t>(nodes_.size()); i++) {
    while (!open.empty() && nodes_[open.back()].depth >= nodes_[i].depth) {
      nodes_[open.back()].end = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  for (int32_t i : open) nodes_[i].end = static_cast<int32_t>(nodes_.size());
}

TokenTrie TokenTrie::FromTokenizer(const Tokenizer& tok) {
  // A piece's text is what it adds after another piece: decoded alone, SentencePiece may treat a leading
  // space specially. The byte pieces 3..258 are their byte (alone, most are not valid UTF-8).
  const int V = tok.vocab_size();
  const int32_t ref = 3 + 'a';
  const std::string ref_text = tok.Decode(&ref, 1);
  std::vector<std::string> bytes(V);
  for (int32_t id = 0; id < V; id++) {
    if (id == Tokenizer::kUnkId || id == Tokenizer::kBosId || id == tok.eos_id()) continue;
    if (id >= 3 && id < 3 + 256) {
      bytes[id] = std::string(1, static_cast<char>(id - 3));
      continue;
    }
    const int32_t pair[2] = {ref, id};
    std::string text = tok.Decode(pair, 2);
    if (text.compare(0, ref_text.size(), ref_text) == 0) bytes[id] = text.substr(ref_text.size());
  }
  return TokenTrie(bytes);
}

template <class State>
int TokenTrie::Allowed(const State& state, uint8_t* allowed) const {
  thread_local std::vector<State> st;  // st[d]: the state after the current node's first d bytes
  st.resize(max_len_ + 1);
  st[0] = state;
  int count = 0;
  const int32_t N = static_cast<int32_t>(nodes_.size());
  for (int32_t i = 0; i < N;) {
    const Node& n = nodes_[i];
    State s = st[n.depth - 1];
    if (!s.Feed(n.byte)) {
      i = n.end;  // no token below extends the prefix either
      continue;
    }
    st[n.depth] = s;
    for (int32_t t = n.tok_begin; t < n.tok_end; t++) allowed[tokens_[t]] = 1;
    count += n.tok_end - n.tok_begin;
    i++;
  }
  return count;
}

template int TokenTrie::Allowed(const JsonRecognizer&, uint8_t*) const;
template int TokenTrie::Allowed(const SchemaRecognizer&, uint8_t*) const;

namespace {

template <class State>
void Mask(const TokenTrie& trie, const State& state, int32_t eos, float* logits, int V) {
  thread_local std::vector<uint8_t> allowed;
  // Allowed() writes ids < trie.vocab_size(); ids of a model vocabulary padded past it have no text.
  allowed.assign(std::max(V, trie.vocab_size()), 0);
  int count = 0;
  if (!state.complete())
    for (int32_t id = 0, n = trie.Allowed(state, allowed.data()); id < V && n > 0; id++) count += allowed[id];
  if (count == 0 && eos >= 0 && eos < V) allowed[eos] = 1;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < V; i++)
    if (!allowed[i]) logits[i] = kNegInf;
}

}  // namespace

void MaskLogits(const TokenTrie& trie, const JsonRecognizer& state, int32_t eos, float* logits, int V) {
  Mask(trie, state, eos, logits, V);
}
void MaskLogits(const TokenTrie& trie, const SchemaRecognizer& state, int32_t eos, float* logits, int V) {
  Mask(trie, state, eos, logits, V);
}

bool SchemaRecognizer::Feed(uint8_t c) {
  if (in_string_) {  // most bytes of a document, and nearly every trie node inside a string
    if (!lex_.Feed(c)) return Fail();
    if (lex_.complete()) {
      in_string_ = false;
      Pop();
    }
    return true;
  }
  while (true) {  // a byte that ends a number or enum is read again by the frame below
    if (depth_ == 0 || done_) return Fail();
    Frame& f = frames_[depth_ - 1];
    const JsonSchema::Node& n = schema_->nodes[f.node];
    switch (n.kind) {
      case JsonSchema::kObject: {
        const std::string& seg = n.segments[f.i];
        if (c != static_cast<uint8_t>(seg[f.pos])) return Fail();
        if (++f.pos < seg.size()) return true;
        if (f.i == n.children.size()) {
          Pop();
          return true;
        }
        const int child = n.children[f.i];
        f.i++;
        f.pos = 0;
        return Push(child);
      }
      case JsonSchema::kArray:
        switch (f.pos) {
          case 0:  // before '['
            if (c != '[') return Fail();
            f.pos = 1;
            return true;
          case 1:  // after '['
            if (c == ']' && n.min_items == 0) {
              Pop();
              return true;
            }
            if (n.max_items == 0) return Fail();
            break;
          case 2:  // after an item
            if (c == ',' && f.i < n.max_items) {
              f.pos = 3;
              return true;
            }
            if (c == ']' && f.i >= n.min_items) {
              Pop();
              return true;
            }
            return Fail();
          default:  // after ','
            break;
        }
        f.i++;
        f.pos = 2;
        if (!Push(n.items)) return false;
        continue;  // the item's first byte
      case JsonSchema::kString:
        if (c != '"') return Fail();  // the rest of the string: the fast path above
        lex_ = JsonRecognizer::Value();
        in_string_ = true;
        return lex_.Feed(c);
      case JsonSchema::kNumber:
      case JsonSchema::kInteger: {
        const bool integer = n.kind == JsonSchema::kInteger;
        JsonRecognizer next = f.pos == 0 ? JsonRecognizer::Value() : lex_;
        const bool digit = c >= '0' && c <= '9';
        const bool continues =
            c == '-' || digit || (!integer && (c == '.' || c == 'e' || c == 'E' || c == '+'));
        if (f.pos == 0 && c != '-' && !digit) return Fail();
        if (continues && next.Feed(c) && !(integer && digit && f.i >= JsonSchema::kMaxIntDigits)) {
          lex_ = next;
          f.pos = 1;
          if (integer && digit) f.i++;
          return true;
        }
        if (f.pos == 0 || !lex_.number_may_end()) return Fail();
        Pop();
        if (done_) return Fail();
        continue;
      }
      case JsonSchema::kEnum: {
        if (f.pos == 0) enum_ = n.values.size() >= 64 ? ~uint64_t{0} : (uint64_t{1} << n.values.size()) - 1;
        uint64_t next = 0;
        bool may_end = false, longer = false;
        for (size_t v = 0; v < n.values.size(); v++) {
          if (!((enum_ >> v) & 1)) continue;
          const std::string& text = n.values[v];
          if (text.size() == f.pos) may_end = true;
          if (text.size() > f.pos && static_cast<uint8_t>(text[f.pos]) == c) {
            next |= uint64_t{1} << v;
            longer |= text.size() > f.pos + 1u;
          }
        }
        if (next != 0) {
          enum_ = next;
          f.pos++;
          if (!longer) Pop();  // every value still matching is complete
          return true;
        }
        if (!may_end) return Fail();
        Pop();
        if (done_) return Fail();
        continue;
      }
    }
    return Fail();
  }
}

}  // namespace tern
