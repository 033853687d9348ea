#include "infer/engine.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>

#include <omp.h>

#include "infer/engine_sequence.h"

namespace tern {

namespace {
GenerationEvent Cancelled(int index) {
  GenerationEvent e;
  e.index = index;
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

namespace {
// Seeds of choices 1..n-1 (splitmix64 of the request's seed and the index): choice 0 keeps the request's
// seed, so n = 1 and the first of n choices give the same text.
uint64_t ChoiceSeed(uint64_t seed, int index) {
  if (index == 0) return seed;
  uint64_t z = seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Tokens whose keys and values a request ever computes: the prompt and every generated token but the last.
// max_tokens = 0 still computes the whole prompt (its last row ends the prefill).
int KvTokens(const GenerationRequest& r) {
  return static_cast<int>(r.prompt.size()) + std::max(r.max_tokens, 1) - 1;
}
}  // namespace

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
  assert(model_->options().max_logit_rows >= opt_.max_batch);
  for (int id = 1; id <= model_->num_adapters(); id++) {
    adapter_served_.push_back(model_->has_adapter(id));
    adapter_roots_.push_back(model_->has_adapter(id) ? model_->adapter_fingerprint(id) : 0);
  }
  metrics_->lora_adapters = ServedAdaptersLocked();
  PublishGauges();
}

Result<int> Engine::AddAdapter(const LoraAdapter& adapter) {
  int id = 0;
  uint64_t root = 0;
  {
    std::lock_guard<std::mutex> lock(model_mu_);
    TERN_ASSIGN_OR_RETURN(id, model_->AddAdapter(adapter));
    root = model_->adapter_fingerprint(id);
  }
  std::lock_guard<std::mutex> lock(mu_);
  adapter_served_.resize(static_cast<size_t>(id), false);
  adapter_served_[static_cast<size_t>(id) - 1] = true;
  adapter_roots_.resize(static_cast<size_t>(id), 0);
  adapter_roots_[static_cast<size_t>(id) - 1] = root;
  metrics_->lora_adapters = ServedAdaptersLocked();
  return id;
}

Status Engine::RemoveAdapter(int id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (id < 1 || id > static_cast<int>(adapter_served_.size()) || !adapter_served_[id - 1])
      return Status::NotFound(fmt::format("adapter {} is not served", id));
    adapter_served_[id - 1] = false;
    retiring_.push_back(id);
    metrics_->lora_adapters = ServedAdaptersLocked();
  }
  cv_.notify_all();  // an idle engine frees it at once
  return Status::Ok();
}

int Engine::ServedAdaptersLocked() const {
  return static_cast<int>(std::count(adapter_served_.begin(), adapter_served_.end(), true));
}

int Engine::adapters_served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ServedAdaptersLocked();
}

bool Engine::adapter_weights_held(int id) const {
  std::lock_guard<std::mutex> lock(model_mu_);
  return model_->has_adapter(id);
}

bool Engine::adapter_in_use(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return adapter_active_.count(id) > 0;
}

// Frees the weights of retired adapters that no sequence names any more (engine thread; submitted_ is
// checked too: a request accepted just before the retirement is still to come).
void Engine::FreeRetiredAdapters() {
  std::vector<int> free;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (retiring_.empty()) return;
    // A request's forks (choices 1..n-1) name its adapter too, so the request itself answers for them.
    auto used = [&](int id) {
      for (const auto* list : {&submitted_, &waiting_})
        for (const auto& s : *list)
          if (s->req.adapter == id) return true;
      for (const auto& s : running_)
        if (s->req.adapter == id) return true;
      return false;
    };
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      if (used(*it)) {
        ++it;
      } else {
        free.push_back(*it);
        it = retiring_.erase(it);
      }
    }
  }
  std::lock_guard<std::mutex> lock(model_mu_);
  for (int id : free) model_->RemoveAdapter(id);
}

Engine::~Engine() {
  Stop();
}

void Engine::Start() {
  thread_ = std::thread([this] {
    if (opt_.threads > 0) omp_set_num_threads(opt_.threads);  // per thread: must be set on the engine thread
    model_->backend()->PrepareThread();  // the engine thread's OpenMP team is not the constructor's
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
  for (auto& s : waiting_) s->handle->Push(Cancelled(s->index));
  for (auto& s : running_) s->handle->Push(Cancelled(s->index));
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
    cv_.wait_for(lock, std::chrono::milliseconds(50),
                 [&] { return stop_ || !submitted_.empty() || !retiring_.empty(); });
  }
}

Result<std::shared_ptr<RequestHandle>> Engine::Submit(GenerationRequest request) {
  const int P = static_cast<int>(request.prompt.size()), V = model_->config().vocab_size;
  if (P == 0) return Status::InvalidArgument("the prompt is empty");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= V)
      return Status::InvalidArgument(fmt::format("prompt token {} is outside [0, {})", t, V));
  for (const auto& [t, bias] : request.logit_bias)
    if (t < 0 || t >= V)
      return Status::InvalidArgument(fmt::format("logit_bias token {} is outside [0, {})", t, V));
  if (request.max_tokens < 0) return Status::InvalidArgument("max_tokens must not be negative");
  if (P + request.max_tokens > max_seq_len_)
    return Status::InvalidArgument(
        fmt::format("this model's maximum context length is {} tokens, but {} were requested ({} in the "
                    "prompt, {} for the completion)",
                    max_seq_len_, P + request.max_tokens, P, request.max_tokens));
  if (request.n < 1 || request.n > kMaxChoices)
    return Status::InvalidArgument(fmt::format("n must be between 1 and {}", kMaxChoices));
  if (request.n > opt_.max_queue)
    return Status::InvalidArgument(
        fmt::format("n = {} is more than the server queues ({}); lower n or raise --max-queue", request.n,
                    opt_.max_queue));
  if (request.logprobs < -1 || request.logprobs > kMaxTopLogprobs)
    return Status::InvalidArgument(fmt::format("logprobs must be -1 (off) or 0..{}", kMaxTopLogprobs));
  if (request.prompt_logprobs && request.logprobs < 0)
    return Status::InvalidArgument("prompt logprobs need logprobs >= 0");
  const int bs = blocks_.block_size();
  const int need = (KvTokens(request) + bs - 1) / bs;
  if (need > blocks_.num_blocks())
    return Status::InvalidArgument(
        fmt::format("the request needs {} KV-cache blocks but the cache has {}; "
                    "lower max_tokens or start the server with a larger --kv-cache-mb",
                    need, blocks_.num_blocks()));
  auto handle = std::make_shared<RequestHandle>();
  const auto now = Clock::now();
  auto make = [&](int index) {
    auto seq = std::make_unique<Sequence>();
    seq->req = request;
    seq->handle = handle;
    seq->index = index;
    seq->tokens = request.prompt;
    seq->prompt_len = P;
    seq->rng.seed(ChoiceSeed(request.seed, index));
    seq->text = std::make_unique<TextStream>(tokenizer_, request.prompt, request.stop);
    seq->arrival = now;
    return seq;
  };
  auto seq = make(0);
  if (request.prompt_logprobs) seq->prompt_lp = std::make_shared<std::vector<TokenLogprob>>(P - 1);
  for (int i = 1; i < request.n; i++) {
    seq->forks.push_back(make(i));
    seq->forks.back()->req.prompt_logprobs = false;  // choice 0 scores the prompt for all
  }
  const int n = request.n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int a = request.adapter;
    if (a != 0 && (a < 0 || a > static_cast<int>(adapter_served_.size()) || !adapter_served_[a - 1]))
      return Status::NotFound(fmt::format("adapter {} is not served (never added, or removed)", a));
    const int64_t queued = metrics_->queue_length.load();
    if (queued + n > opt_.max_queue)
      return Status::Unavailable(
          fmt::format("the server is at capacity ({} requests waiting); retry later", queued));
    // The prefix cache roots each adapter's chain at its weights' fingerprint: a prompt's blocks computed
    // under one adapter are found by the same weights only (again after a reload), never by another's.
    seq->prefix_root = a == 0 ? 0 : adapter_roots_[static_cast<size_t>(a) - 1];
    for (auto& f : seq->forks) f->prefix_root = seq->prefix_root;
    submitted_.push_back(std::move(seq));
    active_count_ += n;
    if (a != 0) adapter_active_[a] += n;
    metrics_->queue_length += n;
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

// The leading blocks of a sequence the prefix cache may supply. At least the last token is always computed:
// its logits give the next token. A prompt being scored computes every token (cached blocks hold keys and
// values, not logits). A preempted sequence looks up its prompt and the tokens it generated.
int Engine::MaxPrefixBlocks(const Sequence& seq) const {
  const int bs = blocks_.block_size();
  if (seq.decoding()) return (static_cast<int>(seq.tokens.size()) - 1) / bs;
  return seq.req.prompt_logprobs ? 0 : (seq.prompt_len - 1) / bs;
}

bool Engine::Admit(Sequence* seq) {
  const int bs = blocks_.block_size(), P = seq->prompt_len, len = static_cast<int>(seq->tokens.size());
  const int total = (KvTokens(seq->req) + bs - 1) / bs;
  const bool resumed = seq->decoding();
  const int max_prefix = MaxPrefixBlocks(*seq);
  std::vector<uint64_t> hashes;
  const uint64_t q0 = blocks_.prefix_queries(), h0 = blocks_.prefix_hits();
  const uint64_t root = seq->prefix_root;
  std::vector<int32_t> prefix = blocks_.AcquirePrefix(seq->tokens.data(), len, max_prefix, &hashes, root);
  const int n = static_cast<int>(prefix.size());
  if (!blocks_.Reserve(total - n)) {
    for (int32_t b : prefix) blocks_.Release(b);
    return false;  // not enough KV memory yet: stays first in line
  }
  metrics_->prefix_cache_queries += blocks_.prefix_queries() - q0;
  metrics_->prefix_cache_hits += blocks_.prefix_hits() - h0;
  seq->blocks = std::move(prefix);
  seq->reserved = total - n;
  seq->computed = n * bs;
  seq->published = n;
  seq->last_hash = n ? hashes.back() : root;
  if (resumed) return true;  // its prompt was counted (and its cached tokens reported) the first time
  seq->cached = n * bs;
  if (seq->index == 0) metrics_->prompt_tokens += P;  // the choices of a request share one prompt
  metrics_->prefix_cache_hit_tokens += seq->cached;
  return true;
}

// Newly completed blocks become findable by later prompts with the same prefix (with speculation, a block of
// confirmed draft tokens once Emit has put them back into `tokens`).
void Engine::PublishFullBlocks(Sequence* s) {
  const int bs = blocks_.block_size();
  for (; s->published < std::min(s->computed, static_cast<int>(s->tokens.size())) / bs; s->published++)
    s->last_hash =
        blocks_.Publish(s->blocks[s->published], s->last_hash, s->tokens.data() + s->published * bs);
}

// Sends a decoding sequence back to wait: its full blocks stay in the prefix cache, every block and promise
// is given back, and it is admitted again like a new prompt of its prompt and generated tokens. Everything
// that decides its next tokens (the tokens, its generator, its recognizers, its text) stays, and row
// independence gives the recomputed keys and values bit for bit, so its output does not change.
void Engine::Preempt(Sequence* s) {
  PublishFullBlocks(s);
  for (int32_t b : s->blocks) blocks_.Release(b);
  s->blocks.clear();
  blocks_.Unreserve(s->reserved);
  s->reserved = 0;
  s->computed = s->published = 0;
  metrics_->preemptions++;
  metrics_->queue_length++;
  // First among the waiting ones of its priority: it arrived before them.
  const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const std::unique_ptr<Sequence>& w) {
    return w->index == 0 && w->req.priority >= s->req.priority;
  });
  const auto it = std::find_if(running_.begin(), running_.end(),
                               [&](const std::unique_ptr<Sequence>& r) { return r.get() == s; });
  waiting_.insert(at, std::move(*it));
  running_.erase(it);
}

// The first waiting request cannot be admitted (the batch is full, or the pool cannot promise its blocks)
// while decoding sequences of higher priority values run: those of the highest values, the latest first,
// are preempted until it fits, and none when even all of them would not make room.
void Engine::PreemptForWaiting() {
  if (!opt_.priority_preemption || waiting_.empty()) return;
  const Sequence* w = waiting_.front().get();
  const int bs = blocks_.block_size();
  const int total = (KvTokens(w->req) + bs - 1) / bs;
  // Would Admit take w once the chosen victims are gone? It needs `total` blocks less the cached prefix
  // blocks someone still holds (a cached-free one it takes back costs what it saves); a victim returns its
  // promises and the blocks nobody else holds (shared prefix blocks stay with their other holders).
  const std::vector<int32_t> hits = blocks_.FindPrefix(w->tokens.data(), static_cast<int>(w->tokens.size()),
                                                       MaxPrefixBlocks(*w), w->prefix_root);
  std::unordered_map<int32_t, int> dropped;  // block -> holders among the victims
  int slots = opt_.max_batch - static_cast<int>(running_.size()), freed = 0;
  auto fits = [&] {
    int held = 0;
    for (int32_t b : hits) {
      const auto it = dropped.find(b);
      held += blocks_.holders(b) - (it == dropped.end() ? 0 : it->second) > 0;
    }
    return slots > 0 && total - held <= blocks_.available() + freed;
  };
  if (fits()) return;
  std::vector<Sequence*> victims;
  for (auto& s : running_)
    if (s->req.priority > w->req.priority && s->decoding() && s->forks.empty()) victims.push_back(s.get());
  std::stable_sort(victims.begin(), victims.end(), [](const Sequence* a, const Sequence* b) {
    return a->req.priority != b->req.priority ? a->req.priority > b->req.priority : a->arrival > b->arrival;
  });
  size_t k = 0;
  for (; k < victims.size() && !fits(); k++) {
    slots++;
    freed += victims[k]->reserved;
    for (int32_t b : victims[k]->blocks) freed += blocks_.holders(b) == ++dropped[b];
  }
  if (!fits()) return;  // even all of them would not make room: nobody is preempted for nothing
  for (size_t i = 0; i < k; i++) Preempt(victims[i]);
}

// Rows of the sequence's prompt to run this step, at most `budget`. A prompt being scored needs the logits
// of every row; one logit row stays free for each sequence that may still join the batch.
int Engine::PrefillRows(const Sequence& seq, int budget) const {
  int n = std::min(static_cast<int>(seq.tokens.size()) - seq.computed, budget);
  if (seq.scores_prompt()) {
    const int room = model_->options().max_logit_rows - static_cast<int>(batch_.logit_rows.size()) -
                     (opt_.max_batch - batch_.S() - 1);
    n = std::min(n, room);
  }
  return std::max(n, 0);
}

void Engine::AddRows(Sequence* seq, int n) {
  const int bs = blocks_.block_size(), row0 = batch_.N();
  const bool scoring = seq->scores_prompt();
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
  batch_.adapters.push_back(seq->req.adapter);
  const size_t table0 = batch_.block_tables.size();
  batch_.block_tables.resize(table0 + model_->max_blocks_per_seq(), 0);
  std::copy(seq->blocks.begin(), seq->blocks.end(), batch_.block_tables.begin() + table0);
  seq->rows = n;
  seq->samples = seq->computed + n == static_cast<int>(seq->tokens.size());
  // Logits wanted: every row of a prompt being scored, else only the row that samples (and the rows of a
  // draft, each of which samples the token after it).
  const int first = scoring ? 0 : (seq->samples ? n - 1 - seq->draft : n);
  seq->logit_begin = first < n ? static_cast<int>(batch_.logit_rows.size()) : -1;
  seq->logit_rows = n - first;
  for (int r = first; r < n; r++) batch_.logit_rows.push_back(row0 + r);
}

// Every decoding sequence's row, and with speculation its draft's rows (speculative.h), within the step's row
// budget and the model's logit rows beyond one per sequence (which keeps a row for every sequence that may
// still join, as PrefillRows does).
void Engine::AddDecodes(std::vector<Sequence*>* in_batch, int* budget) {
  // Grouped by LoRA adapter (stable: arrival order within each), so that each adapter's sequences are
  // consecutive rows and share one pair of adapter products per matrix (InferenceModel::ApplyAdapters).
  std::vector<Sequence*> decodes;
  for (auto& s : running_)
    if (static_cast<int>(s->tokens.size()) - s->computed == 1) decodes.push_back(s.get());
  std::stable_sort(decodes.begin(), decodes.end(),
                   [](const Sequence* a, const Sequence* b) { return a->req.adapter < b->req.adapter; });
  const SpeculativeOptions& spec = opt_.speculative;
  const int D = static_cast<int>(decodes.size());
  const bool speculate = spec.enabled() && (spec.max_batch == 0 || D <= spec.max_batch);
  // Drafts never take every row a prompt could use: while prompts wait or are being prefilled, at most half
  // of what the decode rows leave (else a batch of drafting streams would hold new requests off until it
  // ends).
  bool prompts = !waiting_.empty();
  for (const auto& s : running_) prompts = prompts || static_cast<int>(s->tokens.size()) - s->computed > 1;
  const int rows_left = *budget - D;
  int draft_rows =
      std::min(prompts ? rows_left / 2 : rows_left, model_->options().max_logit_rows - opt_.max_batch);
  std::vector<int32_t> draft;
  for (Sequence* s : decodes) {
    const int len = static_cast<int>(s->tokens.size());
    // Drafted positions must lie within the KV blocks reserved at admission (the tokens whose keys and values
    // the request can ever need), so at most max_tokens - completion - 1 of them.
    const int room = std::min({spec.num_tokens, draft_rows, s->req.max_tokens - (len - s->prompt_len) - 1});
    s->draft = 0;
    if (speculate && room > 0) {
      ProposeByLookup(s->tokens.data(), len, spec.lookup_min, spec.lookup_max, room, &draft);
      if (!draft.empty()) {
        s->tokens.insert(s->tokens.end(), draft.begin(), draft.end());  // taken out again in AfterForward
        s->draft = static_cast<int>(draft.size());
        draft_rows -= s->draft;
        metrics_->spec_drafts++;
        metrics_->spec_draft_tokens += s->draft;
      }
    }
    AddRows(s, 1 + s->draft);
    in_batch->push_back(s);
    *budget -= 1 + s->draft;
  }
}

bool Engine::Step() {
  auto t = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    // By priority (lower first), arrival order within one: each new request goes after every waiting one of
    // its priority or a lower value, and after the forks of admitted requests (choices 1..n-1, at the front).
    for (auto& s : submitted_) {
      const auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const std::unique_ptr<Sequence>& w) {
        return w->index == 0 && w->req.priority > s->req.priority;
      });
      waiting_.insert(at, std::move(s));
    }
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
  FreeRetiredAdapters();
  PreemptForWaiting();

  // Decodes first (one row each), then prompt chunks, then new requests: a long prompt never stalls streams.
  batch_.Clear();
  std::vector<Sequence*> in_batch;
  int budget = opt_.max_batch_tokens;
  AddDecodes(&in_batch, &budget);
  for (auto& s : running_) {
    const int remaining = static_cast<int>(s->tokens.size()) - s->computed;
    const int n = remaining > 1 && s->draft == 0 ? PrefillRows(*s, budget) : 0;  // (a draft is in already)
    if (n > 0) {
      AddRows(s.get(), n);
      in_batch.push_back(s.get());
      budget -= n;
    }
  }
  while (!waiting_.empty() && static_cast<int>(running_.size()) < opt_.max_batch && budget > 0) {
    Sequence* s = waiting_.front().get();
    if (PrefillRows(*s, budget) == 0 || !Admit(s)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    metrics_->queue_length--;
    const int n = PrefillRows(*s, budget);
    AddRows(s, n);
    in_batch.push_back(s);
    budget -= n;
  }
  if (batch_.N() == 0) {
    PublishGauges();
    return false;
  }
  Lap(metrics_, ServeMetrics::kSchedule, &t);
  const float* logits = nullptr;
  {
    std::lock_guard<std::mutex> lock(model_mu_);
    logits = model_->Forward(batch_);
  }
  Lap(metrics_, ServeMetrics::kForward, &t);
  metrics_->forward_steps++;
  metrics_->batch_size.Observe(batch_.S());
  metrics_->batch_tokens.Observe(batch_.N());
  AfterForward(in_batch, logits, &t);
  running_.erase(std::remove_if(running_.begin(), running_.end(), is_done), running_.end());
  PublishGauges();
  Lap(metrics_, ServeMetrics::kEmit, &t);
  return true;
}

// Releases everything the sequence holds and counts how it ended. The caller removes it from its list.
void Engine::Finish(Sequence* s, FinishReason reason) {
  // Choices still held by it (its prompt was not finished) end with it: their request was cancelled.
  for (auto& f : s->forks) {
    metrics_->queue_length--;
    Finish(f.get(), FinishReason::kCancelled);
  }
  s->forks.clear();
  for (int32_t b : s->blocks) blocks_.Release(b);
  s->blocks.clear();
  blocks_.Unreserve(s->reserved);
  s->reserved = 0;
  s->done = true;
  if (reason == FinishReason::kCancelled) {
    s->handle->Push(Cancelled(s->index));
    metrics_->finished_cancelled++;
  } else {
    (reason == FinishReason::kStop ? metrics_->finished_stop : metrics_->finished_length)++;
    metrics_->request_duration.Observe(std::chrono::duration<double>(Clock::now() - s->arrival).count());
  }
  std::lock_guard<std::mutex> lock(mu_);
  active_count_--;
  if (s->req.adapter != 0 && --adapter_active_[s->req.adapter] == 0) adapter_active_.erase(s->req.adapter);
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
