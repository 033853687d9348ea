// Turning logits into tokens (greedy, temperature, top-k, top-p) and into log-probabilities.
//
// The decode loop that calls these lives in infer/engine.h: `tern serve`, `tern generate` and the trainer's
// samples all run through it.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace tern {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
};

// A uniform double in [0, 1) from the raw 64-bit stream (portable, unlike std::uniform_real_distribution).
inline double UniformDouble(std::mt19937_64& rng) {
  return (rng() >> 11) * (1.0 / 9007199254740992.0);
}

// Draws the next token. Ties between equal logits go to the lower id, so the result depends only on the
// logits and the generator's state.
int32_t SampleToken(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng);

// The log-probability of `token` under log_softmax(logits) (the raw logits: no temperature, top-k or top-p),
// and the k most likely tokens with theirs, most likely first (ties: lower id first).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprob ComputeLogprob(const float* logits, int V, int32_t token, int k);

}  // namespace tern
