// Evaluation of a trained model through the serving forward (infer/inference_model.h): the validation loss
// on token shards, and the log-probabilities of a fixed prompt set. `tern eval` and `tern pipeline` use it,
// so a model is judged with the same weights (fp32 or quantized) and the same kernels that serve it.
//
// The windows are the trainer's validation windows (data/loader.h, in order, no shuffle): window i holds
// tokens [i*T, i*T + T] of a shard, its inputs are the first T and its targets the last T. The loss is the
// mean over all targets of -log softmax(logits)[target], the trainer's cross-entropy; with the trainer's T
// and eval_batches * batch_size windows it is the val_loss the trainer logged (to float rounding).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"
#include "infer/choices.h"
#include "infer/inference_model.h"

namespace tern {

struct EvalOptions {
  int seq_len = 0;          // T: tokens of input per window (<= the model's context); 0 = the model's context
  int64_t max_windows = 0;  // 0 = every window of the shards
  Quantize quantize = Quantize::kNone;
};

struct EvalResult {
  int64_t windows = 0,
          tokens = 0;  // windows scored and targets scored (windows * T; with loss masks, those learned)
  double loss = 0;     // mean cross-entropy in nats per token
  double perplexity() const;  // exp(loss)
};

// The loss of `params` on the shards. InvalidArgument when T exceeds the model's context or the shards hold
// no window of T + 1 tokens, or their vocabulary is larger than the model's.
Result<EvalResult> EvaluateShards(Backend* backend, const GptConfig& cfg, const std::vector<float>& params,
                                  const std::vector<std::string>& shards, const EvalOptions& options);

struct PromptScore {
  std::string text;
  int tokens = 0;      // tokens scored: all of the prompt's (an end-of-text token is prepended as context)
  double logprob = 0;  // sum of the tokens' log-probabilities
  double mean() const { return tokens ? logprob / tokens : 0; }
};

// Each prompt's log-probability under the model, the text encoded by `tokenizer` and preceded by its
// end-of-text token (a document's start, as in training). InvalidArgument for an empty prompt or one longer
// than the context.
Result<std::vector<PromptScore>> ScorePrompts(Backend* backend, const GptConfig& cfg,
                                              const std::vector<float>& params, const Tokenizer& tokenizer,
                                              const std::vector<std::string>& prompts, Quantize quantize);

// Multiple-choice accuracy (infer/choices.h), scored as the lm-evaluation-harness and llm.c score HellaSwag:
// each ending is appended to its context (an end-of-text token first, a space between them unless either
// side has one) and its tokens' log-probabilities summed; acc takes the ending with the highest sum,
// acc_norm the highest sum per byte of the ending (which does not favour short endings). A context too
// long for the model loses its oldest tokens (counted in `truncated`).
struct ChoiceItemScore {
  std::vector<double> logprob;  // per ending: the sum over its tokens
  std::vector<int> tokens;      // per ending: its tokens scored
  int predicted = 0, predicted_norm = 0;
  bool truncated = false;
};

struct ChoiceResult {
  int64_t items = 0, correct = 0, correct_norm = 0, truncated = 0;
  std::vector<ChoiceItemScore> per_item;
  double acc() const { return items ? static_cast<double>(correct) / items : 0; }
  double acc_norm() const { return items ? static_cast<double>(correct_norm) / items : 0; }
  // The standard error of an accuracy over `items` (sqrt(p(1-p)/(n-1)), as the harness prints it).
  double StdErr(double p) const;
};

// Called after each forward with the items scored so far and how many of them were right (acc).
using ChoiceProgress = std::function<void(int64_t items_done, int64_t correct)>;

// InvalidArgument when an ending alone does not fit the model's context. Each item's context runs once and
// its endings attend to its cached keys and values (share_prefix; the same logits bit for bit as running
// every ending with its whole context, which share_prefix = false does: the tests' reference).
Result<ChoiceResult> ScoreChoices(Backend* backend, const GptConfig& cfg, const std::vector<float>& params,
                                  const Tokenizer& tokenizer, const std::vector<ChoiceItem>& items,
                                  Quantize quantize, const ChoiceProgress& progress = nullptr,
                                  bool share_prefix = true);

}  // namespace tern
