// GPT-2 weight initialisation on the host, deterministic for a seed on every platform (our own normal
// sampler: std::normal_distribution's algorithm differs between standard libraries).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt_config.h"

namespace tern {

// N(0, 0.02) for embeddings and matrices; attprojw and fcprojw scaled by 1/sqrt(2L) (GPT-2's residual
// scaling); biases 0; layernorm weights 1.
std::vector<float> GptInitialWeights(const GptConfig& cfg, uint64_t seed);

}  // namespace tern
