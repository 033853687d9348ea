// The serving engine: one thread owns the model and runs continuous batching (llama.cpp's server, vLLM).
//
// Requests arrive as native structs (Submit, from any thread) and wait in a queue. Every iteration the
// engine (1) drops requests whose client went away, freeing their KV blocks, (2) gives every running
// sequence its next row(s) - one token for a decoding sequence, the next chunk of its prompt for one being
// prefilled - (3) admits waiting requests by priority, then arrival order, while the batch has room
// (sequences and tokens)
// and the KV pool can promise them the blocks their prompt and max_tokens need, reusing cached prompt
// prefixes, (4) runs one forward over all those rows and samples the next token of every sequence that
// finished its prompt. Results go back through each request's RequestHandle, so an HTTP thread can stream
// them while the engine moves on. Nothing waits for the batch to drain.
//
// A request with n > 1 becomes n sequences (choices). Choice 0 prefills the prompt; choices 1..n-1 wait
// until its prompt blocks are in the prefix cache and then share them, so the prompt is computed once (bar
// its last, partial block). Logprobs, when asked, come from the same logits the sampler sees.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"
#include "infer/inference_model.h"
#include "infer/json_constraint.h"
#include "infer/kv_cache.h"
#include "infer/metrics.h"
#include "infer/sampler.h"
#include "infer/speculative.h"

namespace tern {

enum class FinishReason { kNone, kStop, kLength, kCancelled };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled"

inline constexpr int kMaxChoices = 256;     // n per request (the HTTP API allows fewer: api.h)
inline constexpr int kMaxTopLogprobs = 20;  // alternatives per token

struct GenerationRequest {
  std::vector<int32_t> prompt;  // at least one token
  int max_tokens = 16;          // >= 0; prompt + max_tokens <= Engine::max_seq_len(). 0: the prompt is
                                // prefilled (and scored, with prompt_logprobs) and nothing is generated
  SamplingParams sampling;      // temperature 0 = greedy
  uint64_t seed = 0;            // same seed, same request -> same tokens (choice i > 0: a seed mixed from it)
  std::vector<std::string> stop;  // stop strings (not included in the text)
  bool ignore_eos = false;        // keep going past the end-of-text token (benchmarks)
  // response_format json_object: every choice's completion is one JSON object (json_constraint.h): tokens
  // that cannot extend it get -inf after the logit adjustments, and once it is complete only the
  // end-of-text token is left (finish "stop", ignore_eos or not). Logprobs stay the model's.
  bool json_object = false;
  // response_format json_schema: the same, for one document the schema accepts (SchemaRecognizer in
  // json_constraint.h); compiled once per request and shared by its choices.
  std::shared_ptr<const JsonSchema> json_schema;
  bool JsonConstrained() const { return json_object || json_schema != nullptr; }
  // The LoRA adapter that runs it (InferenceModel::AddAdapter's number), 0 = the base model. Its keys and
  // values differ from the base model's, so the prefix cache keeps each adapter's blocks apart.
  int adapter = 0;
  // Admission order (vLLM's priority scheduling): a waiting request with a lower value is admitted first,
  // arrival order breaks ties; one that does not fit preempts running ones of higher values
  // (EngineOptions::priority_preemption).
  int priority = 0;
  int n = 1;                     // choices sampled from the prompt, 1..kMaxChoices
  int logprobs = -1;             // -1 = off; k in 0..kMaxTopLogprobs: each token's logprob and the k best
  bool prompt_logprobs = false;  // also score prompt tokens 1..P-1 (echo); needs logprobs >= 0
  // OpenAI's logit adjustments before sampling, over the tokens this choice generated so far (not the
  // prompt, as vLLM): logit -= frequency_penalty * count + presence_penalty * (count > 0), then
  // logit_bias[token] is added. Logprobs stay the model's (before them), as vLLM's default.
  float presence_penalty = 0.0f, frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias); tokens within the vocabulary
  bool AdjustsLogits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || !logit_bias.empty();
  }
};

// Applies req's penalties (over the n tokens generated so far) and logit bias to logits[V] in place.
void AdjustLogits(const GenerationRequest& req, const int32_t* generated, int n, float* logits);

// What flows back to the client, in order per choice. The last event of a choice has finish != kNone. With
// max_tokens = 0 a choice has one event: no tokens, kLength, and the prompt logprobs when asked.
struct GenerationEvent {
  int index = 0;                       // the choice, 0..n-1
  std::string text;                    // new text (may be empty)
  std::vector<int32_t> tokens;         // tokens generated since the previous event
  std::vector<TokenLogprob> logprobs;  // one per token in `tokens`, when the request asked for logprobs
  // On the first event of each choice, when the request asked for prompt logprobs: entry i scores prompt
  // token i + 1 (the first prompt token has no logprob). Shared by the choices.
  std::shared_ptr<const std::vector<TokenLogprob>> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;  // set on the last event
};

// Shared by the engine and the thread waiting for the results.
class RequestHandle {
 public:
  // Moves the events that are ready into *out, waiting up to `timeout` for the first one. False on timeout.
  bool Wait(std::vector<GenerationEvent>* out, std::chrono::milliseconds timeout);
  // The client went away: the engine drops the request at its next iteration (finish = kCancelled).
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  friend class Engine;
  void Push(GenerationEvent e);
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenerationEvent> events_;
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int max_batch = 32;             // sequences per forward
  int max_batch_tokens = 256;     // rows per forward: long prompts are prefilled in chunks of this size
  int max_queue = 256;            // waiting requests beyond which Submit refuses
  int max_seq_len = 0;            // prompt + generated tokens per sequence; 0 = the model's context
  int threads = 0;                // compute threads of the engine thread (OpenMP); 0 = OpenMP's default
  double debug_step_delay_s = 0;  // tests only: sleep per iteration, so that a stream lasts long enough
  // A waiting request of a lower priority value than a running one that cannot be admitted (the batch is
  // full or the KV pool short) takes the place of the running ones of the highest values: they give up their
  // blocks and wait to be computed again (vLLM's preemption by recompute; their full blocks stay in the
  // prefix cache, so usually only the last partial one is recomputed). Their output does not change.
  bool priority_preemption = true;
  // Drafts by prompt lookup (speculative.h): a decoding sequence may run up to 1 + num_tokens rows a step.
  // Their logits share the model's max_logit_rows beyond one row per sequence (MakeEngine makes room).
  SpeculativeOptions speculative;
};

class Engine {
 public:
  Engine(std::unique_ptr<InferenceModel> model, const Tokenizer* tokenizer, const EngineOptions& options,
         ServeMetrics* metrics);
  ~Engine();  // stops the thread; unfinished requests end with kCancelled

  void Start();
  void Stop();

  // Queues a request (its n choices share one handle). InvalidArgument when it can never run (too long for
  // the context or the KV cache, bad n or logprobs); Unavailable when the queue is full (retry later).
  Result<std::shared_ptr<RequestHandle>> Submit(GenerationRequest request);

  // One iteration (the thread's loop body; tests call it without Start()). False when there was nothing to
  // do.
  bool Step();

  // LoRA adapters while the engine runs (`tern serve --allow-lora-updates`); both thread-safe.
  // Adds one beside the base weights between two forwards (InferenceModel::AddAdapter) and returns its id
  // for GenerationRequest::adapter. Ids are never reused; the prefix cache keys an adapter's blocks by its
  // weights (InferenceModel::adapter_fingerprint), so the same adapter added again finds the blocks it
  // cached before, and a replacement with other weights never finds its predecessor's.
  Result<int> AddAdapter(const LoraAdapter& adapter);
  // Retires adapter id: requests naming it are refused from now on (NotFound), those already submitted
  // finish on it, and its weights are freed at the first iteration none of them is left. NotFound when id
  // is not served.
  Status RemoveAdapter(int id);
  int adapters_served() const;              // added (at construction or since) and not removed
  bool adapter_weights_held(int id) const;  // tests: a retired adapter's weights are not freed yet
  bool adapter_in_use(int id) const;        // a request submitted, waiting or running names it

  int max_seq_len() const { return max_seq_len_; }
  const InferenceModel& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Thread-safe counts (tests): sequences (choices) queued or running, and KV blocks held.
  int active() const;
  int kv_blocks_used() const;

 private:
  struct Sequence;
  void Run();
  bool Admit(Sequence* seq);
  int MaxPrefixBlocks(const Sequence& seq) const;
  int PrefillRows(const Sequence& seq, int budget) const;
  void AddDecodes(std::vector<Sequence*>* in_batch, int* budget);
  void PreemptForWaiting();
  void Preempt(Sequence* seq);
  void PublishFullBlocks(Sequence* seq);
  void AddRows(Sequence* seq, int n);
  void Finish(Sequence* seq, FinishReason reason);
  void AfterForward(const std::vector<Sequence*>& in_batch, const float* logits,
                    std::chrono::steady_clock::time_point* t);
  int32_t DrawToken(Sequence* seq, const float* logits, int len);
  void Emit(Sequence* seq, int32_t token, TokenLogprob* logprob);
  void PublishGauges();
  void FreeRetiredAdapters();
  int ServedAdaptersLocked() const;  // adapters_served() with mu_ held

  std::unique_ptr<InferenceModel> model_;
  const Tokenizer* tokenizer_;
  EngineOptions opt_;
  ServeMetrics* metrics_;
  int max_seq_len_;
  BlockManager blocks_;

  mutable std::mutex mu_;  // guards submitted_, stop_, and the counts read by active()/kv_blocks_used()
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Sequence>> submitted_;
  bool stop_ = false;
  int active_count_ = 0, kv_used_ = 0;
  std::vector<bool> adapter_served_;     // [id - 1]: may requests name it (guarded by mu_)
  std::vector<int> retiring_;            // removed ids whose weights are still held (guarded by mu_)
  std::map<int, int> adapter_active_;    // adapter id -> its sequences submitted and not finished (mu_)
  std::vector<uint64_t> adapter_roots_;  // [id - 1]: its prefix-cache root, the weights' fingerprint (mu_)
  // Held by the forward and by every change to the model's adapters (which other threads make).
  mutable std::mutex model_mu_;

  // engine thread only
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  ForwardBatch batch_;
  std::thread thread_;
  std::unique_ptr<const TokenTrie> json_vocab_;  // built at the first json_object or json_schema request
};

}  // namespace tern
