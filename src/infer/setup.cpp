#include "infer/setup.h"

#include <algorithm>

namespace tern {

Result<std::unique_ptr<Engine>> MakeEngine(Backend* backend, const GptConfig& cfg,
                                           const std::vector<float>& params, const Tokenizer* tokenizer,
                                           const EngineSetup& setup, ServeMetrics* metrics) {
  EngineOptions eo = setup.engine;
  if (eo.max_batch < 1 || eo.max_batch_tokens < eo.max_batch || eo.max_queue < 1)
    return Status::InvalidArgument("need max_batch >= 1, max_batch_tokens >= max_batch and max_queue >= 1");
  const SpeculativeOptions& spec = eo.speculative;
  if (spec.num_tokens < 0 || spec.lookup_min < 1 || spec.lookup_max < spec.lookup_min || spec.max_batch < 0)
    return Status::InvalidArgument(
        fmt::format("speculative decoding needs tokens >= 0 and 1 <= prompt-lookup-min ({}) <= "
                    "prompt-lookup-max ({})",
                    spec.lookup_min, spec.lookup_max));
  if (tokenizer->vocab_size() > cfg.vocab_size)
    return Status::InvalidArgument(fmt::format("the tokenizer has {} tokens but the model only {}",
                                               tokenizer->vocab_size(), cfg.vocab_size));
  const int seq_len = eo.max_seq_len > 0 ? std::min(eo.max_seq_len, cfg.block_size) : cfg.block_size;
  const size_t per_block = InferenceModel::KvBytesPerBlock(cfg, setup.block_size, setup.kv_dtype);
  const int blocks = static_cast<int>(setup.kv_cache_mb * 1024 * 1024 / per_block);
  const int per_seq = (seq_len + setup.block_size - 1) / setup.block_size;
  if (blocks < per_seq)
    return Status::InvalidArgument(
        fmt::format("--kv-cache-mb {} holds {} tokens; one sequence of {} tokens needs {:.1f} MB (or lower "
                    "--max-seq-len)",
                    setup.kv_cache_mb, blocks * setup.block_size, seq_len, per_seq * per_block / 1048576.0));
  InferenceModelOptions mo;
  mo.quantize = setup.quantize;
  mo.kv_dtype = setup.kv_dtype;
  mo.block_size = setup.block_size;
  mo.num_blocks = blocks;
  mo.max_rows = eo.max_batch_tokens;
  mo.max_seqs = eo.max_batch;
  // Speculation: room for every sequence's draft rows too, beside the default room for scoring prompts.
  if (eo.speculative.enabled())
    mo.max_logit_rows = eo.max_batch * (1 + eo.speculative.num_tokens) + std::min(eo.max_batch_tokens, 64);
  TERN_ASSIGN_OR_RETURN(auto model, InferenceModel::Create(backend, cfg, params, mo));
  for (const LoraAdapter& a : setup.adapters) TERN_RETURN_IF_ERROR(model->AddAdapter(a).status());
  return std::make_unique<Engine>(std::move(model), tokenizer, eo, metrics);
}

}  // namespace tern
