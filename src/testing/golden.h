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
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/status.h"
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

// Reads the golden file; an error names the file and what is wrong with it (missing, bad magic or version,
// an invalid config, a size other than its header implies, a failed read). Callers ASSERT on it:
//   Result<Golden> g = ReadGolden();
//   ASSERT_TRUE(g.ok()) << g.status().ToString();
inline Result<Golden> ReadGolden() {
  const char* dir = std::getenv("TERN_SOURCE_DIR");  // set by ctest; else the tree the test was built from
  const std::string path = std::string(dir ? dir : TERN_TEST_SOURCE_DIR) + "/tests/golden/gpt_tiny.bin";
  const std::string regenerate = " (regenerate it with tests/golden/make_golden.py)";
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound("cannot open " + path + regenerate);
  const auto file_bytes = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  int32_t hdr[10] = {};
  float hp[5] = {};
  in.read(reinterpret_cast<char*>(hdr), sizeof(hdr));
  in.read(reinterpret_cast<char*>(hp), sizeof(hp));
  if (!in) {
    return Status::Corruption(
        fmt::format("{}: {} bytes, shorter than a header{}", path, file_bytes, regenerate));
  }
  if (hdr[0] != 0x7465726E || hdr[1] != 1) {
    return Status::Corruption(fmt::format("{}: magic {:#x} version {}, want 0x7465726e version 1{}", path,
                                          hdr[0], hdr[1], regenerate));
  }
  Golden g;
  g.cfg = {hdr[2], hdr[3], hdr[4], hdr[5], hdr[6]};
  g.B = hdr[7];
  g.T = hdr[8];
  g.steps = hdr[9];
  if (Status st = g.cfg.Validate(); !st.ok()) return st.WithContext(path + regenerate);
  if (g.B <= 0 || g.T <= 0 || g.T > g.cfg.block_size || g.steps < 0) {
    return Status::Corruption(fmt::format("{}: B={} T={} steps={}{}", path, g.B, g.T, g.steps, regenerate));
  }
  g.lr = hp[0], g.beta1 = hp[1], g.beta2 = hp[2], g.eps = hp[3], g.wd = hp[4];
  const uint64_t P = GptParamCount(g.cfg), N = static_cast<uint64_t>(g.B) * g.T;
  // params, inputs, targets, logits, loss, grads, the step losses: 4 bytes each.
  const uint64_t values = 2 * P + 2 * N + N * g.cfg.vocab_size + 1 + g.steps;
  const uint64_t want_bytes = sizeof(hdr) + sizeof(hp) + 4 * values;
  if (file_bytes != want_bytes) {
    return Status::Corruption(
        fmt::format("{}: {} bytes, its header says {}{}", path, file_bytes, want_bytes, regenerate));
  }
  auto read = [&](auto& v, size_t n) {
    v.resize(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(v[0])));
  };
  read(g.params, P);
  read(g.inputs, N);
  read(g.targets, N);
  read(g.logits, N * g.cfg.vocab_size);
  in.read(reinterpret_cast<char*>(&g.loss), 4);
  read(g.grads, P);
  read(g.losses, g.steps);
  if (!in) return Status::IoError("reading " + path + " failed");
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
