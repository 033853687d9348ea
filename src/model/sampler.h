// Turning logits into tokens: greedy, temperature, top-k, top-p; and a plain generation loop.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "model/gpt.h"

namespace tern {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
};

// A uniform double in [0, 1) from the raw 64-bit stream (portable, unlike std::uniform_real_distribution).
inline double UniformDouble(std::mt19937_64& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }

int32_t SampleToken(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng);

// Appends up to max_new tokens to `prompt` by running the model over the (cropped) context each step.
// Stops early at stop_token (if >= 0). Deterministic for a seed.
std::vector<int32_t> GenerateTokens(Gpt& model, std::vector<int32_t> prompt, int max_new, const SamplingParams& params,
                                    uint64_t seed, int32_t stop_token, int max_context);

}  // namespace tern
