#include "model/init.h"

#include <cmath>
#include <random>

namespace tern {
namespace {

// Each tensor is filled in fixed blocks, each block from its own generator seeded by (seed, tensor, block):
// the blocks fill in parallel and the weights depend on the seed alone, never on the thread count.
// GPT-2 124M initialises in well under a second instead of several seconds on one core.
constexpr size_t kBlock = size_t{1} << 16;

// N(0, std) by Box-Muller, both outputs of each pair used.
void FillNormal(float* p, size_t n, double std, uint64_t stream_seed) {
  std::mt19937_64 rng(stream_seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  for (size_t i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform())) * std, a = 2.0 * M_PI * uniform();
    p[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) p[i + 1] = static_cast<float>(r * std::sin(a));
  }
}

}  // namespace

std::vector<float> GptInitialWeights(const GptConfig& cfg, uint64_t seed) {
  auto layout = GptParamLayout(cfg);
  std::vector<float> w(GptParamCount(cfg), 0.0f);
  const double residual_scale = 1.0 / std::sqrt(2.0 * cfg.n_layer);
  for (size_t ti = 0; ti < layout.size(); ti++) {
    const auto& t = layout[ti];
    float* p = w.data() + t.offset;
    if (t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw") {
      for (size_t i = 0; i < t.numel; i++) p[i] = 1.0f;
    } else if (t.decay) {
      const double std = 0.02 * ((t.name == "attprojw" || t.name == "fcprojw") ? residual_scale : 1.0);
      const size_t blocks = (t.numel + kBlock - 1) / kBlock;
      const uint64_t tensor_seed = SplitMix64(seed ^ SplitMix64(ti + 1));
#pragma omp parallel for schedule(static) if (blocks > 1)
      for (size_t b = 0; b < blocks; b++) {
        const size_t i0 = b * kBlock;
        FillNormal(p + i0, std::min(t.numel, i0 + kBlock) - i0, std, SplitMix64(tensor_seed + b));
      }
    }
  }
  return w;
}

}  // namespace tern
