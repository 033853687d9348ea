#include "infer/evaluate.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "data/loader.h"
#include "fmt/format.h"

namespace tern {
namespace {

constexpr int kBlock = 16;        // tokens per KV block
constexpr int kRowBudget = 2048;  // rows (tokens) per forward: the windows of one forward share it

// One forward's inputs: `count` sequences of T tokens each, every row's logits wanted.
void BuildBatch(const int32_t* tokens, int count, int T, int max_blocks, ForwardBatch* b) {
  b->Clear();
  const int nb = (T + kBlock - 1) / kBlock;
  for (int s = 0; s < count; s++) {
    b->seqs.insert(b->seqs.end(), {s * T, T, T});
    for (int j = 0; j < max_blocks; j++) b->block_tables.push_back(j < nb ? s * nb + j : 0);
    for (int p = 0; p < T; p++) {
      b->tokens.push_back(tokens[s * T + p]);
      b->positions.push_back(p);
      b->slots.push_back((s * nb + p / kBlock) * kBlock + p % kBlock);
      b->logit_rows.push_back(s * T + p);
    }
  }
}

// log softmax(row)[target], in double.
double LogProb(const float* row, int V, int target) {
  const float mx = *std::max_element(row, row + V);
  double sum = 0;
  for (int v = 0; v < V; v++) sum += std::exp(static_cast<double>(row[v]) - mx);
  return static_cast<double>(row[target]) - mx - std::log(sum);
}

// Sum over rows of log p(targets[r]) for the N rows of `logits`.
double SumLogProbs(const float* logits, const int32_t* targets, int N, int V) {
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int r = 0; r < N; r++) total += LogProb(logits + static_cast<size_t>(r) * V, V, targets[r]);
  return total;
}

Result<std::unique_ptr<InferenceModel>> MakeModel(Backend* backend, const GptConfig& cfg,
                                                  const std::vector<float>& params, int T, int windows,
                                                  Quantize quantize) {
  InferenceModelOptions o;
  o.quantize = quantize;
  o.block_size = kBlock;
  o.num_blocks = windows * ((T + kBlock - 1) / kBlock);
  o.max_rows = windows * T;
  o.max_seqs = windows;
  o.max_logit_rows = windows * T;
  return InferenceModel::Create(backend, cfg, params, o);
}

}  // namespace

double EvalResult::perplexity() const {
  return std::exp(loss);
}

Result<EvalResult> EvaluateShards(Backend* backend, const GptConfig& cfg, const std::vector<float>& params,
                                  const std::vector<std::string>& shards, const EvalOptions& options) {
  const int T = options.seq_len > 0 ? options.seq_len : cfg.block_size;
  if (T > cfg.block_size) {
    return Status::InvalidArgument(
        fmt::format("--seq-len {} is longer than the model's context of {} tokens", T, cfg.block_size));
  }
  if (options.max_windows < 0) return Status::InvalidArgument("the number of windows must be positive");
  const int per_forward = std::max(1, kRowBudget / T);
  TERN_ASSIGN_OR_RETURN(auto loader, DataLoader::Open(shards, 1, T, /*seed=*/0, /*shuffle=*/false));
  if (static_cast<int64_t>(loader->vocab_size()) > cfg.vocab_size) {
    return Status::InvalidArgument(fmt::format(
        "the shards' vocabulary has {} tokens, the model's {}: they were prepared with another tokenizer",
        loader->vocab_size(), cfg.vocab_size));
  }
  int64_t n = static_cast<int64_t>(loader->windows_per_epoch());
  if (options.max_windows > 0) n = std::min(n, options.max_windows);
  const int k = static_cast<int>(std::min<int64_t>(per_forward, n));
  TERN_ASSIGN_OR_RETURN(auto model, MakeModel(backend, cfg, params, T, k, options.quantize));

  std::vector<int32_t> inputs, targets;
  ForwardBatch fb;
  Batch batch;
  double total = 0;
  for (int64_t done = 0; done < n;) {
    const int count = static_cast<int>(std::min<int64_t>(k, n - done));
    inputs.clear();
    targets.clear();
    for (int i = 0; i < count; i++) {
      TERN_RETURN_IF_ERROR(loader->Next(&batch));
      inputs.insert(inputs.end(), batch.inputs.begin(), batch.inputs.end());
      targets.insert(targets.end(), batch.targets.begin(), batch.targets.end());
    }
    BuildBatch(inputs.data(), count, T, model->max_blocks_per_seq(), &fb);
    const float* logits = model->Forward(fb);
    total += SumLogProbs(logits, targets.data(), count * T, cfg.vocab_size);
    done += count;
  }
  EvalResult r;
  r.windows = n;
  r.tokens = n * T;
  r.loss = -total / static_cast<double>(r.tokens);
  return r;
}

Result<std::vector<PromptScore>> ScorePrompts(Backend* backend, const GptConfig& cfg,
                                              const std::vector<float>& params, const Tokenizer& tokenizer,
                                              const std::vector<std::string>& prompts, Quantize quantize) {
  std::vector<PromptScore> out;
  if (prompts.empty()) return out;
  TERN_ASSIGN_OR_RETURN(auto model, MakeModel(backend, cfg, params, cfg.block_size, 1, quantize));
  ForwardBatch fb;
  for (size_t i = 0; i < prompts.size(); i++) {
    std::vector<int32_t> tokens{tokenizer.eos_id()};
    tokenizer.EncodeAppend(prompts[i], &tokens);
    const int P = static_cast<int>(tokens.size()) - 1;  // tokens scored
    if (P < 1) return Status::InvalidArgument(fmt::format("prompt {} is empty", i + 1));
    if (P > cfg.block_size) {
      return Status::InvalidArgument(
          fmt::format("prompt {} has {} tokens; the model's context is {}", i + 1, P, cfg.block_size));
    }
    BuildBatch(tokens.data(), 1, P, model->max_blocks_per_seq(), &fb);
    const float* logits = model->Forward(fb);
    PromptScore s;
    s.text = prompts[i];
    s.tokens = P;
    s.logprob = SumLogProbs(logits, tokens.data() + 1, P, cfg.vocab_size);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tern
