#include "infer/generate.h"

#include "infer/setup.h"

namespace tern {

std::vector<Generated> RunToCompletion(Engine& engine, const std::shared_ptr<RequestHandle>& handle, int n,
                                       const std::function<void(const GenerationEvent&)>& on_event) {
  std::vector<Generated> out(n);
  int finished = 0;
  while (finished < n) {
    const bool worked = engine.Step();
    std::vector<GenerationEvent> events;
    handle->Wait(&events, std::chrono::milliseconds(0));
    for (const auto& e : events) {
      if (on_event) on_event(e);
      if (e.index < 0 || e.index >= n) continue;
      Generated& g = out[e.index];
      g.tokens.insert(g.tokens.end(), e.tokens.begin(), e.tokens.end());
      g.text += e.text;
      if (e.finish != FinishReason::kNone) {
        g.finish = e.finish;
        finished++;
      }
    }
    // Nothing ran and nothing came: the request can never be admitted (cannot happen for a request that
    // Submit accepted on an engine nobody else uses); stop rather than spin.
    if (!worked && events.empty() && engine.active() == 0) break;
  }
  return out;
}

double KvCacheMbFor(const GptConfig& cfg, int sequences, int seq_len, int block_size) {
  const int blocks = sequences * ((seq_len + block_size - 1) / block_size);
  return blocks * static_cast<double>(InferenceModel::KvBytesPerBlock(cfg, block_size, DType::kF32)) /
             (1024.0 * 1024.0) +
         1e-6;  // MakeEngine rounds down
}

Result<std::vector<Generated>> GenerateOnce(const GptConfig& cfg, const std::vector<float>& params,
                                            const Tokenizer& tokenizer, const GenerationRequest& request,
                                            int max_seq_len) {
  std::unique_ptr<Backend> backend = MakeCpuFastBackend();
  ServeMetrics metrics;
  EngineSetup setup;
  setup.engine.max_batch = request.n;
  setup.engine.max_batch_tokens = std::max(request.n, 256);
  setup.engine.max_queue = request.n;
  setup.engine.max_seq_len = max_seq_len;
  setup.kv_cache_mb = KvCacheMbFor(cfg, request.n, std::min(max_seq_len, cfg.block_size), setup.block_size);
  TERN_ASSIGN_OR_RETURN(auto engine, MakeEngine(backend.get(), cfg, params, &tokenizer, setup, &metrics));
  TERN_ASSIGN_OR_RETURN(auto handle, engine->Submit(request));
  return RunToCompletion(*engine, handle, request.n);
}

}  // namespace tern
