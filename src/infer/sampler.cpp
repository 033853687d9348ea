#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tern {
namespace {

// The order every selection below uses: higher logit first, then lower id.
struct Before {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

}  // namespace

int32_t SampleToken(const float* logits, int V, const SamplingParams& params, std::mt19937_64& rng) {
  if (params.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const Before before{logits};
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  int keep = V;  // candidates: ids[0..keep), sorted by `before` when top-k or top-p asked for an order
  if (params.top_k > 0 && params.top_k < V) keep = params.top_k;
  const float maxv = *std::max_element(logits, logits + V);
  auto weight = [&](int32_t id) { return std::exp((logits[id] - maxv) / params.temperature); };
  if (keep < V) std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), before);
  if (params.top_p < 1.0f) {
    // Nucleus: the smallest most-likely-first prefix of the candidates whose mass reaches top_p. Sorting
    // all V tokens costs milliseconds per sequence and step at V = 50257; a trained model's nucleus is
    // usually a few hundred tokens, so sort a growing head until its mass suffices (the prefix a full sort
    // would give).
    double total = 0;
    if (keep < V) {
      for (int i = 0; i < keep; i++) total += weight(ids[i]);
    } else {
      for (int i = 0; i < V; i++) total += weight(i);
    }
    const double target = params.top_p * total;
    int sorted = keep < V ? keep : 0;
    for (int head = std::min(keep, 256);; head = std::min(keep, head * 4)) {
      if (head > sorted) {
        std::partial_sort(ids.begin() + sorted, ids.begin() + head, ids.end(), before);
        sorted = head;
      }
      double mass = 0;
      int cut = 0;
      while (cut < head && mass < target) mass += weight(ids[cut++]);
      if (mass >= target || head == keep) {
        keep = cut;
        break;
      }
    }
  }
  std::vector<double> probs(keep);
  double sum = 0;
  for (int i = 0; i < keep; i++) sum += probs[i] = weight(ids[i]);
  const double r = UniformDouble(rng) * sum;
  double acc = 0;
  for (int i = 0; i < keep; i++) {
    acc += probs[i];
    if (r < acc) return ids[i];
  }
  return ids[keep - 1];
}

TokenLogprob ComputeLogprob(const float* logits, int V, int32_t token, int k) {
  const float maxv = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int i = 0; i < V; i++) sum += std::exp(static_cast<double>(logits[i]) - maxv);
  const double lse = maxv + std::log(sum);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(logits[token] - lse);
  k = std::min(k, V);
  if (k <= 0) return out;
  // One pass keeping the k best in order: most tokens lose the comparison with the current k-th at once.
  const Before before{logits};
  std::vector<int32_t> best;
  best.reserve(k + 1);
  for (int32_t i = 0; i < V; i++) {
    if (static_cast<int>(best.size()) == k && !before(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, before), i);
    if (static_cast<int>(best.size()) > k) best.pop_back();
  }
  for (int32_t id : best) out.top.emplace_back(id, static_cast<float>(logits[id] - lse));
  return out;
}

}  // namespace tern
