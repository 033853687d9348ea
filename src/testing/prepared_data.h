// Test-only: the small prepared corpus the trainer tests train on, prepared in process once per ctest run
// (testing::SharedPreparedData shares it between the test processes).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "data/prepare.h"
#include "testing/processes.h"

namespace tern::testing {

// Returns the data directory (vocab 300, val fraction 0.1), or "" when preparing failed.
inline std::string SharedSmallPreparedData() {
  return testing::SharedPreparedData([](const std::string& corpus, const std::string& out) {
    PrepareOptions p;
    p.inputs = {corpus};
    p.out_dir = out;
    p.vocab_size = 300;
    p.val_fraction = 0.1;
    p.progress = nullptr;
    auto r = Prepare(p);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok();
  });
}

// A second dataset for data.mix tests: `text` prepared into `out` with the tokenizer of `data_dir` (val
// fraction 0.1). Returns false (with a test failure) when preparing failed.
inline bool PrepareWithTokenizerOf(const std::string& data_dir, const std::string& text_path,
                                   const std::string& out) {
  PrepareOptions p;
  p.inputs = {text_path};
  p.out_dir = out;
  p.tokenizer = data_dir + "/tokenizer.model";
  p.val_fraction = 0.1;
  p.progress = nullptr;
  auto r = Prepare(p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok();
}

// Conversations (a --chat JSONL file) prepared into `out` with the tokenizer of `data_dir`. Returns false
// (with a test failure) when preparing failed.
inline bool PrepareChatWithTokenizerOf(const std::string& data_dir, const std::string& jsonl_path,
                                       const std::string& out, double val_fraction) {
  PrepareOptions p;
  p.inputs = {jsonl_path};
  p.out_dir = out;
  p.tokenizer = data_dir + "/tokenizer.model";
  p.chat = true;
  p.val_fraction = val_fraction;
  p.progress = nullptr;
  auto r = Prepare(p);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok();
}

// Text unlike MakeCorpus's words: lines of numbers and arithmetic, for a dataset a model can tell apart.
inline std::string NumbersCorpus(size_t bytes, uint64_t seed = 5) {
  std::string out;
  uint64_t x = seed;
  while (out.size() < bytes) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const unsigned a = static_cast<unsigned>(x >> 33) % 100, b = static_cast<unsigned>(x >> 45) % 100;
    out += std::to_string(a) + " + " + std::to_string(b) + " = " + std::to_string(a + b) + "\n";
  }
  return out;
}

}  // namespace tern::testing
