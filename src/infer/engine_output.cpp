// The engine's output side: sampling and logprobs over a step's logits, then text and events per sequence.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "infer/engine_sequence.h"

namespace tern {

void AdjustLogits(const GenerationRequest& req, const int32_t* generated, int n, float* logits) {
  std::unordered_map<int32_t, int> count;
  for (int i = 0; i < n; i++) count[generated[i]]++;
  for (const auto& [token, c] : count) logits[token] -= req.frequency_penalty * c + req.presence_penalty;
  for (const auto& [token, bias] : req.logit_bias) logits[token] += bias;
}

// The token after s->tokens[0, len) from its logits row: the request's logit adjustments (over the tokens it
// generated so far), its JSON mask, then the sampler with the sequence's generator; a JSON recognizer is fed
// the token. Called for one sequence at a time per thread.
int32_t Engine::DrawToken(Sequence* s, const float* l, int len) {
  const int V = model_->config().vocab_size;
  if (!s->req.AdjustsLogits() && !s->req.JsonConstrained()) return SampleToken(l, V, s->req.sampling, s->rng);
  thread_local std::vector<float> adjusted;  // reused: a fresh 200 KB per sequence and step was mmap'd
  adjusted.assign(l, l + V);
  if (s->req.AdjustsLogits())
    AdjustLogits(s->req, s->tokens.data() + s->prompt_len, len - s->prompt_len, adjusted.data());
  if (s->req.json_schema && !s->schema_started) {
    s->schema = SchemaRecognizer(s->req.json_schema.get());
    s->schema_started = true;
  }
  if (s->req.json_schema)
    MaskLogits(*json_vocab_, s->schema, tokenizer_->eos_id(), adjusted.data(), V);
  else if (s->req.json_object)
    MaskLogits(*json_vocab_, s->json, tokenizer_->eos_id(), adjusted.data(), V);
  int32_t tok = SampleToken(adjusted.data(), V, s->req.sampling, s->rng);
  if (s->req.JsonConstrained()) {
    // A masked token has no weight; the sampler's last-candidate fallback could still return one.
    if (std::isinf(adjusted[tok]))
      tok = static_cast<int32_t>(std::max_element(adjusted.begin(), adjusted.end()) - adjusted.begin());
    if (tok < json_vocab_->vocab_size()) {
      if (s->req.json_schema)
        s->schema.Feed(json_vocab_->bytes(tok));
      else
        s->json.Feed(json_vocab_->bytes(tok));
    }
  }
  return tok;
}

void Engine::AfterForward(const std::vector<Sequence*>& in_batch, const float* logits,
                          std::chrono::steady_clock::time_point* t) {
  const int V = model_->config().vocab_size;
  auto row = [&](int r) { return logits + static_cast<size_t>(r) * V; };
  // Sampling and logprobs are independent per sequence (each has its own generator) and per row, so they
  // run in parallel; at V = 50257 a logprob is a full pass over the vocabulary.
  std::vector<Sequence*> sampling;
  struct PromptRow {
    Sequence* seq;
    int logit_row, position;  // the logits at `position` score prompt token position + 1
  };
  std::vector<PromptRow> prompt_rows;
  for (Sequence* s : in_batch) {
    if (s->samples) sampling.push_back(s);
    if (s->scores_prompt())
      for (int r = 0; r < s->logit_rows; r++)
        if (s->computed + r + 1 < s->prompt_len)
          prompt_rows.push_back({s, s->logit_begin + r, s->computed + r});
  }
  const int n = static_cast<int>(sampling.size()), np = static_cast<int>(prompt_rows.size());
  for (Sequence* s : sampling)
    if (s->req.JsonConstrained() && !json_vocab_)
      json_vocab_ = std::make_unique<const TokenTrie>(TokenTrie::FromTokenizer(*tokenizer_));
  // Per sampling sequence: the tokens it emits this step (one, or with a draft up to draft + 1) and their
  // logprobs.
  std::vector<std::vector<int32_t>> next(n);
  std::vector<std::vector<TokenLogprob>> lps(n);
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && static_cast <size_t>(n) * V > 65536)
  for (int i = 0; i < n; i++) {
    Sequence* s = sampling[i];
    if (s->req.max_tokens == 0) continue;  // the prompt only: nothing to draw
    // Row r of a draft's logits follows draft token r - 1: the token drawn there is kept, and the next row
    // looked at, only while it equals the draft's (speculative.h), so each token is drawn exactly as a
    // one-row decode would have drawn it.
    const int len = static_cast<int>(s->tokens.size()) - s->draft;
    for (int r = 0; r <= s->draft; r++) {
      const float* l = row(s->logit_begin + s->logit_rows - 1 - s->draft + r);
      const int32_t tok = DrawToken(s, l, len + r);
      next[i].push_back(tok);
      if (s->req.logprobs >= 0) lps[i].push_back(ComputeLogprob(l, V, tok, s->req.logprobs));
      if (r == s->draft || tok != s->tokens[len + r]) break;
    }
  }
#pragma omp parallel for schedule(dynamic, 1) if (np > 1)
  for (int i = 0; i < np; i++) {
    const PromptRow& p = prompt_rows[i];
    (*p.seq->prompt_lp)[p.position] =
        ComputeLogprob(row(p.logit_row), V, p.seq->tokens[p.position + 1], p.seq->req.logprobs);
  }
  Lap(metrics_, ServeMetrics::kSample, t);

  for (int i = 0; i < n; i++) {
    Sequence* s = sampling[i];
    if (s->draft == 0) continue;
    // A drafted sequence keeps the keys and values of its rows up to the last draft token confirmed; the
    // others are overwritten when those positions are computed again. Its tokens lose the draft, and get the
    // confirmed part back (and the token after it) from Emit.
    const int accepted = static_cast<int>(next[i].size()) - 1;
    metrics_->spec_accepted_tokens += accepted;
    s->rows = 1 + accepted;
    s->tokens.resize(s->tokens.size() - s->draft);
    s->draft = 0;
  }
  for (Sequence* s : in_batch) {
    s->computed += s->rows;
    PublishFullBlocks(s);
    // The prompt is in the cache: the other choices go first in line and find its blocks there.
    if (!s->forks.empty() && s->computed >= s->prompt_len) {
      for (auto& f : s->forks) f->prompt_lp = s->prompt_lp;
      waiting_.insert(waiting_.begin(), std::make_move_iterator(s->forks.begin()),
                      std::make_move_iterator(s->forks.end()));
      s->forks.clear();
    }
  }
  for (int i = 0; i < n; i++) {
    Sequence* s = sampling[i];
    if (next[i].empty()) {
      Emit(s, -1, nullptr);
      continue;
    }
    for (size_t k = 0; k < next[i].size() && !s->done; k++)
      Emit(s, next[i][k], s->req.logprobs >= 0 ? &lps[i][k] : nullptr);
  }
}

// Appends the sampled token, turns it into text and sends the event (the last one when the sequence ends).
// tok < 0: a max_tokens = 0 sequence finished its prompt and ends with a single event without tokens.
void Engine::Emit(Sequence* s, int32_t tok, TokenLogprob* logprob) {
  if (tok < 0) {
    GenerationEvent e;
    e.index = s->index;
    e.prompt_logprobs = s->prompt_lp;
    e.finish = FinishReason::kLength;
    e.prompt_tokens = s->prompt_len;
    e.cached_tokens = s->cached;
    s->handle->Push(std::move(e));
    Finish(s, FinishReason::kLength);
    return;
  }
  const auto now = Clock::now();
  s->tokens.push_back(tok);
  const int completion = static_cast<int>(s->tokens.size()) - s->prompt_len;
  metrics_->generation_tokens++;
  if (completion == 1) {
    metrics_->time_to_first_token.Observe(std::chrono::duration<double>(now - s->arrival).count());
  } else {
    metrics_->time_per_output_token.Observe(std::chrono::duration<double>(now - s->last_token).count());
  }
  s->last_token = now;
  GenerationEvent e;
  e.index = s->index;
  e.tokens.push_back(tok);
  if (logprob) e.logprobs.push_back(std::move(*logprob));
  if (completion == 1) e.prompt_logprobs = s->prompt_lp;
  FinishReason finish = FinishReason::kNone;
  if ((!s->req.ignore_eos || s->req.JsonConstrained()) && tok == tokenizer_->eos_id()) {
    finish = FinishReason::kStop;
    e.text = s->text->Flush();
  } else {
    bool stopped = false;
    e.text = s->text->Add(tok, &stopped);
    if (stopped) finish = FinishReason::kStop;
  }
  if (finish == FinishReason::kNone && completion >= s->req.max_tokens) {
    finish = FinishReason::kLength;
    e.text += s->text->Flush();
  }
  if (finish == FinishReason::kNone) {
    s->handle->Push(std::move(e));
    return;
  }
  e.finish = finish;
  e.prompt_tokens = s->prompt_len;
  e.completion_tokens = completion;
  e.cached_tokens = s->cached;
  s->handle->Push(std::move(e));
  Finish(s, finish);
}

}  // namespace tern
