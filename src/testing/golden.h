// Test-only: reads tests/golden/gpt_tiny.bin (written by tests/golden/make_golden.py) for the golden tests of
// every backend and precision (model, train fp16, cuda), and the error measure they share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/gpt_config.h"

namespace tern::testing {

struct Golden {
  GptConfig cfg;
  int B = 0, T = 0, steps = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0;
  std::vector<float> params, logits, grads, losses;
  std::vector<int32_t> inputs, targets;
  float loss = 0;
};

inline Golden LoadGolden() {
  Golden g;
  const char* dir = std::getenv("TERN_SOURCE_DIR");
  std::ifstream in(std::string(dir ? dir : ".") + "/tests/golden/gpt_tiny.bin", std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing tests/golden/gpt_tiny.bin; regenerate with tests/golden/make_golden.py";
  int32_t hdr[10];
  in.read(reinterpret_cast<char*>(hdr), sizeof(hdr));
  EXPECT_EQ(hdr[0], 0x7465726E);
  EXPECT_EQ(hdr[1], 1);
  g.cfg = {hdr[2], hdr[3], hdr[4], hdr[5], hdr[6]};
  g.B = hdr[7];
  g.T = hdr[8];
  g.steps = hdr[9];
  float hp[5];
  in.read(reinterpret_cast<char*>(hp), sizeof(hp));
  g.lr = hp[0], g.beta1 = hp[1], g.beta2 = hp[2], g.eps = hp[3], g.wd = hp[4];
  auto read = [&](auto& v, size_t n) {
    v.resize(n);
    in.read(reinterpret_cast<char*>(v.data()), n * sizeof(v[0]));
  };
  const size_t P = GptParamCount(g.cfg), N = static_cast<size_t>(g.B) * g.T;
  read(g.params, P);
  read(g.inputs, N);
  read(g.targets, N);
  read(g.logits, N * g.cfg.vocab_size);
  in.read(reinterpret_cast<char*>(&g.loss), 4);
  read(g.grads, P);
  read(g.losses, g.steps);
  EXPECT_TRUE(in.good());
  return g;
}

// max |a*scale_a - b| / max |b|: one bound per tensor, relative to its largest element.
inline double RelMaxError(const float* a, const float* b, size_t n, double scale_a = 1) {
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < n; i++) {
    diff = std::max(diff, std::fabs(a[i] * scale_a - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// The worst RelMaxError of the model's logits (after its last Forward) against the golden ones, over all B*T
// positions.
inline double WorstLogitError(const Gpt& model, const Golden& g) {
  std::vector<float> logits(g.cfg.vocab_size);
  double worst = 0;
  for (int b = 0; b < g.B; b++)
    for (int t = 0; t < g.T; t++) {
      model.GetLogits(b, t, logits.data());
      const float* want = g.logits.data() + (static_cast<size_t>(b) * g.T + t) * g.cfg.vocab_size;
      worst = std::max(worst, RelMaxError(logits.data(), want, logits.size()));
    }
  return worst;
}

}  // namespace tern::testing
