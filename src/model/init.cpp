#include "model/init.h"

#include <cmath>
#include <random>

namespace tern {

std::vector<float> GptInitialWeights(const GptConfig& cfg, uint64_t seed) {
  auto layout = GptParamLayout(cfg);
  std::vector<float> w(GptParamCount(cfg), 0.0f);
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0); };
  auto normal = [&] {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const double residual_scale = 1.0 / std::sqrt(2.0 * cfg.n_layer);
  for (const auto& t : layout) {
    float* p = w.data() + t.offset;
    if (t.name == "ln1w" || t.name == "ln2w" || t.name == "lnfw") {
      for (size_t i = 0; i < t.numel; i++) p[i] = 1.0f;
    } else if (t.decay) {
      double std = 0.02 * ((t.name == "attprojw" || t.name == "fcprojw") ? residual_scale : 1.0);
      for (size_t i = 0; i < t.numel; i++) p[i] = static_cast<float>(normal() * std);
    }
  }
  return w;
}

}  // namespace tern
