#include "serve/response_builder.h"

#include <algorithm>
#include <numeric>

namespace tern {

ResponseBuilder::ResponseBuilder(const ParsedRequest& request, ResponseMeta meta)
    : meta_(std::move(meta)),
      stream_usage_(request.include_usage),
      echo_(request.echo),
      logprobs_(request.logprobs),
      n_(std::max(1, std::min(request.n, request.gen.n))),
      echo_text_(request.echo_text),
      prompt_(request.echo ? request.gen.prompt : std::vector<int32_t>()),
      choices_(std::max(1, request.gen.n)) {
  for (size_t i = 0; i < choices_.size(); i++) {
    Choice& c = choices_[i];
    c.all.index = static_cast<int>(i);
    c.all.has_logprobs = logprobs_;
    c.space_pending = meta_.chat;
  }
}

void ResponseBuilder::Split(const GenerationEvent& ev, ChoiceOut* echo, ChoiceOut* delta) {
  Choice& c = choices_.at(ev.index);
  echo->index = delta->index = ev.index;
  echo->has_logprobs = delta->has_logprobs = logprobs_;
  if (!c.started) {
    c.started = true;
    if (echo_) {
      echo->text = echo_text_;
      static const std::vector<TokenLogprob> kNone;
      if (logprobs_) echo->logprobs = EchoLogprobs(prompt_, ev.prompt_logprobs ? *ev.prompt_logprobs : kNone);
      for (int32_t t : prompt_) c.offset += meta_.tokenizer ? TokenChars(*meta_.tokenizer, t) : 0;
    }
  }
  delta->text = ev.text;
  // The chat template ends with "Assistant:", so a reply starts with the space that follows it: dropped.
  if (c.space_pending && !delta->text.empty()) {
    c.space_pending = false;
    if (delta->text[0] == ' ') delta->text.erase(0, 1);
  }
  if (logprobs_) delta->logprobs = ev.logprobs;  // (best_of alone asks the engine for them too)
  delta->text_offset = c.offset;
  if (meta_.tokenizer)
    for (int32_t t : ev.tokens) c.offset += TokenChars(*meta_.tokenizer, t);
}

void ResponseBuilder::CountFinish(const GenerationEvent& ev) {
  if (ev.finish == FinishReason::kNone) return;
  if (ev.finish == FinishReason::kCancelled) {
    cancelled_ = true;
    return;
  }
  finished_++;
  usage_.prompt_tokens = ev.prompt_tokens;  // the choices share the prompt: counted once
  usage_.completion_tokens += ev.completion_tokens;
  if (ev.index == 0) usage_.cached_tokens = ev.cached_tokens;
}

void ResponseBuilder::Add(const GenerationEvent& ev) {
  CountFinish(ev);
  if (ev.finish == FinishReason::kCancelled) return;
  ChoiceOut echo, delta;
  Split(ev, &echo, &delta);
  Choice& c = choices_[ev.index];
  for (const TokenLogprob& t : ev.logprobs) {
    c.logprob_sum += t.logprob;
    c.logprob_count++;
  }
  ChoiceOut& all = c.all;
  all.text += echo.text + delta.text;
  all.logprobs.insert(all.logprobs.end(), echo.logprobs.begin(), echo.logprobs.end());
  all.logprobs.insert(all.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  if (ev.finish != FinishReason::kNone) all.finish = ev.finish;
}

std::string ResponseBuilder::Body() const {
  std::vector<int> order(choices_.size());
  std::iota(order.begin(), order.end(), 0);
  if (n_ < static_cast<int>(choices_.size())) {
    // best_of: "the highest log probability per token" (OpenAI), best first; ties keep the lower index
    auto mean = [&](int i) {
      const Choice& c = choices_[i];
      return c.logprob_count ? c.logprob_sum / c.logprob_count : 0.0;
    };
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return mean(a) > mean(b); });
    order.resize(n_);
  }
  std::vector<ChoiceOut> out;
  for (int i : order) {
    out.push_back(choices_[i].all);
    out.back().index = static_cast<int>(out.size()) - 1;
  }
  return CompletionJson(meta_, out, usage_);
}

std::vector<std::string> ResponseBuilder::StreamStart() const {
  std::vector<std::string> out;
  if (!meta_.chat) return out;
  for (const Choice& c : choices_) {
    ChoiceOut role;
    role.index = c.all.index;
    out.push_back(ChunkJson(meta_, role, /*role_only=*/true));
  }
  return out;
}

std::vector<std::string> ResponseBuilder::Stream(const GenerationEvent& ev) {
  std::vector<std::string> out;
  CountFinish(ev);
  if (ev.finish == FinishReason::kCancelled) return out;
  ChoiceOut echo, delta;
  Split(ev, &echo, &delta);
  const bool has_echo = !echo.text.empty() || !echo.logprobs.empty();
  const bool has_delta = !delta.text.empty() || !delta.logprobs.empty();
  if (ev.finish == FinishReason::kNone) {
    if (has_echo) out.push_back(ChunkJson(meta_, echo));
    // one chunk per generated token, even when its text is held back (half a character, a possible stop
    // string): clients see progress and time to first token is honest
    out.push_back(ChunkJson(meta_, delta));
  } else if (has_echo && !has_delta) {
    // nothing after the echo (max_tokens 0): one chunk, the echo with its finish_reason
    echo.finish = ev.finish;
    out.push_back(ChunkJson(meta_, echo));
  } else {
    if (has_echo) out.push_back(ChunkJson(meta_, echo));
    if (has_delta) out.push_back(ChunkJson(meta_, delta));
    ChoiceOut last;
    last.index = ev.index;
    last.finish = ev.finish;
    out.push_back(ChunkJson(meta_, last));
  }
  if (ev.finish != FinishReason::kNone && finished() && stream_usage_)
    out.push_back(UsageChunkJson(meta_, usage_));
  return out;
}

}  // namespace tern
