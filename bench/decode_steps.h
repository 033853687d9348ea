// The decode benchmarks' shared setup (serve_load forward, decode_bound, lora_paging): sequences of an
// InferenceModel with their own KV blocks, in order (sequence s holds blocks s * per_seq ...), a prefill of
// random tokens each, then decode steps of one token per sequence. No engine, no sampling: the forward alone.
// And the --shape flag of the benchmarks that make a random model.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "infer/inference_model.h"

namespace tern::bench {

// "L,H,C,V,T" (e.g. 12,12,768,50257,1024) -> a valid model shape; nothing when it is not one.
inline std::optional<GptConfig> ParseShape(const std::string& shape) {
  GptConfig cfg;
  std::istringstream in(shape);
  char comma;
  if (!(in >> cfg.n_layer >> comma >> cfg.n_head >> comma >> cfg.n_embd >> comma >> cfg.vocab_size >> comma >>
        cfg.block_size) ||
      !cfg.Validate().ok())
    return std::nullopt;
  return cfg;
}

class DecodeSequences {
 public:
  DecodeSequences(InferenceModel& m, int per_seq) : m_(m), per_seq_(per_seq) {}

  // Fills the caches of sequences [0, sequences) with `context` random tokens (one prefill each).
  void Prefill(int sequences, int context) {
    const int bs = m_.options().block_size;
    for (int s = 0; s < sequences; s++) {
      ForwardBatch b;
      for (int p = 0; p < context; p++) {
        b.tokens.push_back(Token());
        b.positions.push_back(p);
        b.slots.push_back(Table(s)[p / bs] * bs + p % bs);
      }
      b.seqs = {0, context, context};
      b.block_tables = Table(s);
      b.logit_rows = {context - 1};
      m_.Forward(b);
    }
  }

  // One decode step of sequences [0, sequences): each one's next token at position p (its logits read).
  ForwardBatch Step(int sequences, int p) {
    const int bs = m_.options().block_size;
    ForwardBatch b;
    for (int s = 0; s < sequences; s++) {
      b.tokens.push_back(Token());
      b.positions.push_back(p);
      b.slots.push_back(Table(s)[p / bs] * bs + p % bs);
      b.seqs.insert(b.seqs.end(), {s, 1, p + 1});
      const std::vector<int32_t> t = Table(s);
      b.block_tables.insert(b.block_tables.end(), t.begin(), t.end());
      b.logit_rows.push_back(s);
    }
    return b;
  }

 private:
  std::vector<int32_t> Table(int s) const {
    std::vector<int32_t> t(m_.max_blocks_per_seq(), 0);
    for (int b = 0; b < per_seq_; b++) t[b] = s * per_seq_ + b;
    return t;
  }
  int32_t Token() { return 3 + static_cast<int32_t>(rng_() % 256); }

  InferenceModel& m_;
  int per_seq_;
  std::mt19937_64 rng_{1};
};

}  // namespace tern::bench
