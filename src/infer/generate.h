// Generation without a server: requests run to the end on the calling thread (no engine thread). `tern
// generate` and the trainer's periodic samples use it, so all of tern decodes through one loop, the
// engine's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "infer/engine.h"
#include "model/gpt_config.h"

namespace tern {

// What one choice produced.
struct Generated {
  std::vector<int32_t> tokens;  // the generated tokens (an end-of-text token included when it ended there)
  std::string text;             // their text
  FinishReason finish = FinishReason::kNone;
};

// Steps `engine` until all `n` choices of `handle` have finished (or were cancelled). on_event, if given,
// sees every event as it arrives, e.g. to print text as it is generated.
std::vector<Generated> RunToCompletion(Engine& engine, const std::shared_ptr<RequestHandle>& handle, int n,
                                       const std::function<void(const GenerationEvent&)>& on_event = {});

// KV-cache megabytes that hold `sequences` sequences of `seq_len` tokens each.
double KvCacheMbFor(const GptConfig& cfg, int sequences, int seq_len, int block_size = 16);

// One request on a one-off engine over `params`, host fp32 weights, on the fast CPU backend (cpu-ref, cpu
// and cuda all have the inference ops; this one-off engine runs on the host whatever device trained the
// weights). max_seq_len caps prompt + completion (e.g. the length the model was trained at). The
// trainer's samples: it copies its live weights to the host for this.
Result<std::vector<Generated>> GenerateOnce(const GptConfig& cfg, const std::vector<float>& params,
                                            const Tokenizer& tokenizer, const GenerationRequest& request,
                                            int max_seq_len);

}  // namespace tern
