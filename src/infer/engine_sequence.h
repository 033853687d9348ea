// Engine internals shared by engine.cpp (queue, admission, scheduling) and engine_output.cpp (sampling,
// logprobs, events): the state of one sequence. Not part of the engine's interface.
#pragma once

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "infer/engine.h"
#include "infer/text_stream.h"

namespace tern {

using Clock = std::chrono::steady_clock;

struct Engine::Sequence {
  GenerationRequest req;
  std::shared_ptr<RequestHandle> handle;  // shared by the request's choices
  int index = 0;                          // which choice
  std::vector<int32_t> tokens;            // prompt, then the generated tokens
  int prompt_len = 0;
  int computed = 0;             // leading tokens whose keys and values are in the cache
  int cached = 0;               // prompt tokens found in the prefix cache
  std::vector<int32_t> blocks;  // block table
  int reserved = 0;             // blocks promised by the pool, not yet taken
  int published = 0;            // leading blocks published to the prefix cache
  uint64_t last_hash = 0;       // chain hash of the last published block
  std::mt19937_64 rng;
  std::unique_ptr<TextStream> text;
  Clock::time_point arrival, last_token;
  // Choices 1..n-1, held by choice 0 until its prompt blocks are in the prefix cache: admitted earlier,
  // they would all prefill the same prompt.
  std::vector<std::unique_ptr<Sequence>> forks;
  // Prompt logprobs (entry i scores prompt token i + 1): filled during choice 0's prefill when asked,
  // shared with its forks, sent with each choice's first event.
  std::shared_ptr<std::vector<TokenLogprob>> prompt_lp;
  int rows = 0;          // rows in the current batch
  int logit_begin = -1;  // its first row of the current logits (-1: none)
  int logit_rows = 0;    // rows of the current logits that are its (prompt rows being scored, then the last)
  bool samples = false;  // the last of its rows gives its next token
  bool done = false;

  bool scores_prompt() const { return req.prompt_logprobs && computed < prompt_len; }
};

// Adds the time since *t to the phase's counter and moves *t to now.
inline void Lap(ServeMetrics* m, int phase, Clock::time_point* t) {
  const auto now = Clock::now();
  m->engine_ns[phase] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - *t).count();
  *t = now;
}

}  // namespace tern
