#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tern {

int32_t SampleToken(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng) {
  if (params.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  // Candidates sorted by logit when top-k/top-p need an order; otherwise all tokens in id order.
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int keep = V;
  if (params.top_k > 0 && params.top_k < V) keep = params.top_k;
  if (keep < V || params.top_p < 1.0f) {
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  }
  float maxv = -INFINITY;
  for (int i = 0; i < keep; i++) maxv = std::max(maxv, logits[ids[i]]);
  std::vector<double> probs(keep);
  double sum = 0;
  for (int i = 0; i < keep; i++) sum += probs[i] = std::exp((logits[ids[i]] - maxv) / params.temperature);
  if (params.top_p < 1.0f) {  // nucleus: the smallest prefix whose mass reaches top_p
    double mass = 0;
    int cut = keep;
    for (int i = 0; i < keep; i++) {
      mass += probs[i] / sum;
      if (mass >= params.top_p) { cut = i + 1; break; }
    }
    keep = cut;
    sum = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
  }
  double r = UniformDouble(rng) * sum, acc = 0;
  for (int i = 0; i < keep; i++) {
    acc += probs[i];
    if (r < acc) return ids[i];
  }
  return ids[keep - 1];
}

std::vector<int32_t> GenerateTokens(Gpt& model, std::vector<int32_t> tokens, int max_new, const SamplingParams& params,
                                    uint64_t seed, int32_t stop_token, int max_context) {
  std::mt19937_64 rng(seed);
  const int V = model.config().vocab_size;
  std::vector<float> logits(V);
  for (int i = 0; i < max_new; i++) {
    int T = std::min<int>(tokens.size(), max_context);
    const int32_t* ctx = tokens.data() + tokens.size() - T;
    model.Forward(ctx, nullptr, 1, T);
    model.GetLogits(0, T - 1, logits.data());
    int32_t next = SampleToken(logits.data(), V, params, rng);
    tokens.push_back(next);
    if (next == stop_token) break;
  }
  return tokens;
}

}  // namespace tern
