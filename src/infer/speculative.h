// Speculative decoding by prompt lookup (vLLM's "ngram" method, llama.cpp's lookup decoding): a decoding
// sequence whose last few tokens occurred earlier in its prompt or output proposes the tokens that followed
// them there as a draft; one forward computes the real next token after each draft token, and the draft is
// kept up to the first token the model would not have produced. No draft model and no extra weights: a
// draft costs only the rows it adds to the forward, which on a memory-bound decode step are nearly free.
//
// The output is the model's, not an approximation. The engine draws each token exactly as without
// speculation (the same logit adjustments, constraint masks and sampler, one draw from the sequence's
// generator per token) and keeps a draft token only when it equals the drawn one; since every op is row
// independent (backend.h), a drafted row's logits are bitwise those a one-row decode would have computed,
// so a seeded request returns the same tokens and logprobs with speculation on or off. (Exceptions: where a
// kernel is picked by row count, bf16 weights in an engine of one stream on an AMX CPU and cuBLAS matmuls on
// a GPU, drafted rows round differently, and the output keeps the model's distribution, not its exact
// digits.)
#pragma once

#include <cstdint>
#include <vector>

namespace tern {

struct SpeculativeOptions {
  int num_tokens = 0;  // draft tokens per sequence and step (vLLM's num_speculative_tokens); 0 = off
  int lookup_max = 4;  // the longest suffix matched against the earlier context (prompt_lookup_max)
  int lookup_min = 2;  // the shortest (prompt_lookup_min): shorter matches propose nothing
  int max_batch = 0;   // no drafts while more sequences than this decode (vLLM's disable_by_batch_size;
                       // a full batch is compute-bound and extra rows cost their full price); 0 = no limit
  bool enabled() const { return num_tokens > 0; }
};

// The draft for the sequence tokens[0, n): the longest suffix of between lookup_min and lookup_max tokens
// that also occurs earlier (its latest occurrence), followed by up to max_draft of the tokens after that
// occurrence. A match whose continuation runs into the suffix itself continues the repeat (a loop of period p
// proposes whole periods). Empty when nothing matches. Replaces *draft.
void ProposeByLookup(const int32_t* tokens, int n, int lookup_min, int lookup_max, int max_draft,
                     std::vector<int32_t>* draft);

}  // namespace tern
