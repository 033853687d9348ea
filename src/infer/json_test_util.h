// Test helpers shared by json_constraint_test.cpp and json_schema_test.cpp: a synthetic vocabulary, and the
// token trie's allowed set checked against feeding every token to a copy of the state by hand.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "infer/json_constraint.h"

namespace tern::json_test {

// A synthetic BPE-like vocabulary: 3 control tokens (no bytes), the 256 bytes, then words, JSON punctuation
// runs, numbers and spaces.
inline std::vector<std::string> SyntheticVocab(int V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> v(3);
  for (int b = 0; b < 256; b++) v.push_back(std::string(1, static_cast<char>(b)));
  const std::string letters = "etaoinshrdlucmfwypvbgkqjxz", punct = "{}[]\":,.- _0123456789\n";
  while (static_cast<int>(v.size()) < V) {
    std::string t;
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 7) {
      if (rng() % 2) t = " ";
      for (int n = 2 + static_cast<int>(rng() % 7); n > 0; n--) t += letters[rng() % (rng() % 3 ? 10 : 26)];
    } else if (kind < 9) {
      for (int n = 1 + static_cast<int>(rng() % 3); n > 0; n--) t += punct[rng() % punct.size()];
    } else {
      t = std::string(1 + rng() % 8, ' ');
    }
    v.push_back(t);
  }
  return v;
}

// For each state: trie.Allowed marks exactly the tokens whose bytes a copy of the state accepts, and at least
// one (the byte tokens always leave a way on).
template <class State>
void ExpectTrieAllowsWhatFeedingAccepts(const TokenTrie& trie, const std::vector<std::string>& vocab,
                                        const std::vector<State>& states) {
  for (const State& state : states) {
    std::vector<uint8_t> got(vocab.size(), 0);
    const int count = trie.Allowed(state, got.data());
    int want_count = 0;
    for (size_t id = 0; id < vocab.size(); id++) {
      State r = state;
      const bool want = !vocab[id].empty() && r.Feed(vocab[id]);
      want_count += want;
      ASSERT_EQ(got[id], want) << "token " << id << " '" << vocab[id] << "'";
    }
    EXPECT_EQ(count, want_count);
    EXPECT_GT(count, 0);
  }
}

}  // namespace tern::json_test
