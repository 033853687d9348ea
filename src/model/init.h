// GPT-2 weight initialisation on the host, deterministic for a seed on every platform (our own normal
// sampler: std::normal_distribution's algorithm differs between standard libraries).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_config.h"

namespace tern {

// SplitMix64's mixing function: the seed of each tensor's (and block's) generator from (seed, tensor, block).
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// N(0, 0.02) for embeddings and matrices; attprojw and fcprojw scaled by 1/sqrt(2L) (GPT-2's residual
// scaling); biases 0; layernorm weights 1.
std::vector<float> GptInitialWeights(const GptConfig& cfg, uint64_t seed);

}  // namespace tern
