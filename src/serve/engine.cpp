#include "serve/engine.h"

#include <algorithm>
#include <cassert>

#include <omp.h>

#include "serve/text_stream.h"

namespace tern {

using Clock = std::chrono::steady_clock;

namespace {
GenerationEvent Cancelled() {
  GenerationEvent e;
  e.finish = FinishReason::kCancelled;
  return e;
}
}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kNone:
      break;
  }
  return "none";
}

bool RequestHandle::Wait(std::vector<GenerationEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

void RequestHandle::Push(GenerationEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

struct Engine::Sequence {
  GenerationRequest req;
  std::shared_ptr<RequestHandle> handle;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens
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
  int rows = 0;          // rows in the current batch
  int logit_index = -1;  // its row of the current logits, -1 when it samples nothing this step
  bool done = false;
};

Engine::Engine(std::unique_ptr<InferenceModel> model, const Tokenizer* tokenizer,
               const EngineOptions& options, ServeMetrics* metrics)
    : model_(std::move(model)),
      tokenizer_(tokenizer),
      opt_(options),
      metrics_(metrics),
      max_seq_len_(options.max_seq_len > 0 ? std::min(options.max_seq_len, model_->config().block_size)
                                           : model_->config().block_size),
      blocks_(model_->options().num_blocks, model_->options().block_size) {
  assert(opt_.max_batch <= model_->options().max_seqs && opt_.max_batch_tokens <= model_->options().max_rows);
  assert(opt_.max_batch <= opt_.max_batch_tokens);
  logits_.resize(static_cast<size_t>(opt_.max_batch) * model_->config().vocab_size);
  PublishGauges();
}

Engine::~Engine() {
  Stop();
}

void Engine::Start() {
  thread_ = std::thread([this] {
    if (opt_.threads > 0) omp_set_num_threads(opt_.threads);  // per thread: must be set on the engine thread
    Run();
  });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Whatever is left ends now: its clients get a final event instead of waiting forever.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : submitted_) waiting_.push_back(std::move(s));
  submitted_.clear();
  for (auto& s : waiting_) s->handle->Push(Cancelled());
  for (auto& s : running_) s->handle->Push(Cancelled());
  waiting_.clear();
  running_.clear();
}

void Engine::Run() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (Step()) {
      if (opt_.debug_step_delay_s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(opt_.debug_step_delay_s));
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !submitted_.empty(); });
  }
}

Result<std::shared_ptr<RequestHandle>> Engine::Submit(GenerationRequest request) {
  const int P = static_cast<int>(request.prompt.size()), V = model_->config().vocab_size;
  if (P == 0) return Status::InvalidArgument("the prompt is empty");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= V)
      return Status::InvalidArgument(fmt::format("prompt token {} is outside [0, {})", t, V));
  if (request.max_tokens < 1) return Status::InvalidArgument("max_tokens must be at least 1");
  if (P + request.max_tokens > max_seq_len_)
    return Status::InvalidArgument(
        fmt::format("this model's maximum context length is {} tokens, but {} were requested ({} in the "
                    "prompt, {} for the "
                    "completion)",
                    max_seq_len_, P + request.max_tokens, P, request.max_tokens));
  const int bs = blocks_.block_size();
  const int need = (P + request.max_tokens - 1 + bs - 1) / bs;
  if (need > blocks_.num_blocks())
    return Status::InvalidArgument(
        fmt::format("the request needs {} KV-cache blocks but the cache has {}; "
                    "lower max_tokens or start the server with a larger --kv-cache-mb",
                    need, blocks_.num_blocks()));
  auto seq = std::make_unique<Sequence>();
  seq->handle = std::make_shared<RequestHandle>();
  seq->tokens = request.prompt;
  seq->prompt_len = P;
  seq->rng.seed(request.seed);
  seq->text = std::make_unique<TextStream>(tokenizer_, request.prompt, request.stop);
  seq->arrival = Clock::now();
  seq->req = std::move(request);
  auto handle = seq->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t queued = metrics_->queue_length.load();
    if (queued >= opt_.max_queue)
      return Status::Unavailable(
          fmt::format("the server is at capacity ({} requests waiting); retry later", queued));
    submitted_.push_back(std::move(seq));
    active_count_++;
    metrics_->queue_length++;
  }
  cv_.notify_all();
  return handle;
}

int Engine::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_count_;
}

int Engine::kv_blocks_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kv_used_;
}

bool Engine::Admit(Sequence* seq) {
  const int bs = blocks_.block_size(), P = seq->prompt_len;
  const int total = (P + seq->req.max_tokens - 1 + bs - 1) / bs;
  // At least the last prompt token is always computed: its logits give the first generated token.
  std::vector<uint64_t> hashes;
  const uint64_t q0 = blocks_.prefix_queries(), h0 = blocks_.prefix_hits();
  std::vector<int32_t> prefix = blocks_.AcquirePrefix(seq->tokens.data(), P, (P - 1) / bs, &hashes);
  const int n = static_cast<int>(prefix.size());
  if (!blocks_.Reserve(total - n)) {
    for (int32_t b : prefix) blocks_.Release(b);
    return false;  // not enough KV memory yet: stays first in line
  }
  metrics_->prefix_cache_queries += blocks_.prefix_queries() - q0;
  metrics_->prefix_cache_hits += blocks_.prefix_hits() - h0;
  seq->blocks = std::move(prefix);
  seq->reserved = total - n;
  seq->computed = seq->cached = n * bs;
  seq->published = n;
  seq->last_hash = n ? hashes.back() : 0;
  metrics_->prompt_tokens += P;
  metrics_->prefix_cache_hit_tokens += seq->cached;
  return true;
}

void Engine::AddRows(Sequence* seq, int n) {
  const int bs = blocks_.block_size(), row0 = batch_.N();
  for (int p = seq->computed; p < seq->computed + n; p++) {
    if (p / bs == static_cast<int>(seq->blocks.size())) {
      assert(seq->reserved > 0);
      seq->blocks.push_back(blocks_.AllocateReserved());
      seq->reserved--;
    }
    batch_.tokens.push_back(seq->tokens[p]);
    batch_.positions.push_back(p);
    batch_.slots.push_back(seq->blocks[p / bs] * bs + p % bs);
  }
  if (seq->computed < seq->prompt_len)
    metrics_->prefill_tokens += std::min(n, seq->prompt_len - seq->computed);
  batch_.seqs.insert(batch_.seqs.end(), {row0, n, seq->computed + n});
  const size_t table0 = batch_.block_tables.size();
  batch_.block_tables.resize(table0 + model_->max_blocks_per_seq(), 0);
  std::copy(seq->blocks.begin(), seq->blocks.end(), batch_.block_tables.begin() + table0);
  seq->rows = n;
  seq->logit_index = -1;
  if (seq->computed + n == static_cast<int>(seq->tokens.size())) {
    seq->logit_index = static_cast<int>(batch_.logit_rows.size());
    batch_.logit_rows.push_back(row0 + n - 1);
  }
}

bool Engine::Step() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : submitted_) waiting_.push_back(std::move(s));
    submitted_.clear();
  }
  // Clients that went away: their slots and blocks are freed before anything else is scheduled.
  for (auto& s : running_)
    if (s->handle->cancelled()) Finish(s.get(), FinishReason::kCancelled);
  for (auto& s : waiting_) {
    if (s->handle->cancelled()) {
      metrics_->queue_length--;
      Finish(s.get(), FinishReason::kCancelled);
    }
  }
  auto is_done = [](const std::unique_ptr<Sequence>& s) { return s->done; };
  running_.erase(std::remove_if(running_.begin(), running_.end(), is_done), running_.end());
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), is_done), waiting_.end());

  // Decodes first (one row each), then prompt chunks, then new requests: a long prompt never stalls streams.
  batch_.Clear();
  std::vector<Sequence*> in_batch;
  int budget = opt_.max_batch_tokens;
  for (auto& s : running_) {
    if (static_cast<int>(s->tokens.size()) - s->computed == 1) {
      AddRows(s.get(), 1);
      in_batch.push_back(s.get());
      budget--;
    }
  }
  for (auto& s : running_) {
    const int remaining = static_cast<int>(s->tokens.size()) - s->computed;
    if (remaining > 1 && budget > 0) {
      AddRows(s.get(), std::min(remaining, budget));
      in_batch.push_back(s.get());
      budget -= s->rows;
    }
  }
  while (!waiting_.empty() && static_cast<int>(running_.size()) < opt_.max_batch && budget > 0) {
    Sequence* s = waiting_.front().get();
    if (!Admit(s)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    metrics_->queue_length--;
    AddRows(s, std::min(s->prompt_len - s->computed, budget));
    in_batch.push_back(s);
    budget -= s->rows;
  }
  if (batch_.N() == 0) {
    PublishGauges();
    return false;
  }
  model_->Forward(batch_, logits_.data());
  metrics_->forward_steps++;
  metrics_->batch_size.Observe(batch_.S());
  metrics_->batch_tokens.Observe(batch_.N());
  AfterForward(in_batch, logits_.data());
  running_.erase(std::remove_if(running_.begin(), running_.end(), is_done), running_.end());
  PublishGauges();
  return true;
}

void Engine::AfterForward(const std::vector<Sequence*>& in_batch, const float* logits) {
  const int V = model_->config().vocab_size, bs = blocks_.block_size();
  // Sampling is independent per sequence (each has its own generator), so it can run in parallel.
  std::vector<Sequence*> sampling;
  for (Sequence* s : in_batch)
    if (s->logit_index >= 0) sampling.push_back(s);
  std::vector<int32_t> next(sampling.size());
  const int n = static_cast<int>(sampling.size());
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && static_cast <size_t>(n) * V > 65536)
  for (int i = 0; i < n; i++)
    next[i] = SampleToken(logits + static_cast<size_t>(sampling[i]->logit_index) * V, V,
                          sampling[i]->req.sampling, sampling[i]->rng);

  for (Sequence* s : in_batch) {
    s->computed += s->rows;
    // Newly completed blocks become findable by later prompts with the same prefix.
    for (; s->published < s->computed / bs; s->published++)
      s->last_hash =
          blocks_.Publish(s->blocks[s->published], s->last_hash, s->tokens.data() + s->published * bs);
  }
  const auto now = Clock::now();
  for (int i = 0; i < n; i++) {
    Sequence* s = sampling[i];
    const int32_t tok = next[i];
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
    e.tokens.push_back(tok);
    FinishReason finish = FinishReason::kNone;
    if (!s->req.ignore_eos && tok == tokenizer_->eos_id()) {
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
    } else {
      e.finish = finish;
      e.prompt_tokens = s->prompt_len;
      e.completion_tokens = completion;
      e.cached_tokens = s->cached;
      s->handle->Push(std::move(e));
      Finish(s, finish);
    }
  }
}

// Releases everything the sequence holds and counts how it ended. The caller removes it from its list.
void Engine::Finish(Sequence* s, FinishReason reason) {
  for (int32_t b : s->blocks) blocks_.Release(b);
  s->blocks.clear();
  blocks_.Unreserve(s->reserved);
  s->reserved = 0;
  s->done = true;
  if (reason == FinishReason::kCancelled) {
    s->handle->Push(Cancelled());
    metrics_->finished_cancelled++;
  } else {
    (reason == FinishReason::kStop ? metrics_->finished_stop : metrics_->finished_length)++;
    metrics_->request_duration.Observe(std::chrono::duration<double>(Clock::now() - s->arrival).count());
  }
  std::lock_guard<std::mutex> lock(mu_);
  active_count_--;
}

void Engine::PublishGauges() {
  metrics_->running_sequences = static_cast<int64_t>(running_.size());
  metrics_->kv_blocks_used = blocks_.used();
  metrics_->kv_blocks_free = blocks_.free();
  metrics_->kv_blocks_cached = blocks_.cached_free();
  metrics_->kv_blocks_reserved = blocks_.reserved();
  std::lock_guard<std::mutex> lock(mu_);
  kv_used_ = blocks_.used();
}

}  // namespace tern
