// tern generate RUN_DIR --prompt TEXT: samples through the serving engine (serve/engine.h), so the command
// line and the server share one decode loop. Several samples run as one batch.
#include <cstdio>
#include <memory>

#include "backend/registry.h"
#include "cli/command.h"
#include "serve/engine.h"
#include "serve/setup.h"

namespace tern::cli {
namespace {

struct GenerateOptions {
  std::string run_dir, prompt, device = "cpu", quantize = "none";
  int max_tokens = 128, top_k = 40, num_samples = 1;
  float temperature = 0.8f, top_p = 1.0f;
  uint64_t seed = 1;
};

int Fail(const Status& st, const char* hint = "") {
  std::fprintf(stderr, "tern generate: %s%s\n", st.message().c_str(), hint);
  return 1;
}

int RunGenerate(const GenerateOptions& o) {
  auto weights = LoadServeWeights(o.run_dir);
  if (!weights.ok())
    return Fail(weights.status(), "\n  (RUN_DIR must hold model.safetensors: the output of `tern train`)");
  auto tok = Tokenizer::Load(weights->tokenizer_path);
  if (!tok.ok()) return Fail(tok.status());
  auto backend = MakeBackend(o.device);
  if (!backend.ok()) return Fail(backend.status());
  auto quantize = ParseQuantize(o.quantize);
  if (!quantize.ok()) return Fail(quantize.status());
  const GptConfig& cfg = weights->config;
  std::vector<int32_t> prompt = tok->Encode(o.prompt);
  if (prompt.empty()) prompt.push_back(tok->eos_id());  // start of a document
  if (static_cast<int>(prompt.size()) >= cfg.block_size) {
    return Fail(Status::InvalidArgument(
        fmt::format("the prompt has {} tokens; the model's context is {}", prompt.size(), cfg.block_size)));
  }
  const int max_tokens = std::min<int>(o.max_tokens, cfg.block_size - static_cast<int>(prompt.size()));
  if (max_tokens < o.max_tokens)
    std::fprintf(stderr, "tern generate: the context is %d tokens; generating %d\n", cfg.block_size,
                 max_tokens);

  ServeMetrics metrics;
  EngineSetup setup;
  setup.quantize = *quantize;
  setup.engine.max_batch = o.num_samples;
  setup.engine.max_batch_tokens = std::max(o.num_samples, 256);
  setup.kv_cache_mb = o.num_samples * (InferenceModel::KvBytesPerBlock(cfg, setup.block_size) / 1048576.0) *
                      (cfg.block_size / setup.block_size + 1);
  auto engine = MakeEngine(backend->get(), cfg, weights->params, &tok.value(), setup, &metrics);
  if (!engine.ok()) return Fail(engine.status());
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < o.num_samples; i++) {
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling = {o.temperature, o.top_k, o.top_p};
    r.seed = o.seed + i;
    auto h = (*engine)->Submit(std::move(r));
    if (!h.ok()) return Fail(h.status());
    handles.push_back(h.value());
  }
  // One sample streams to stdout as it is generated; several are printed in order when all are done.
  const std::string prompt_text = tok->Decode(prompt);
  std::vector<std::string> texts(o.num_samples, prompt_text);
  if (o.num_samples == 1) std::fputs(prompt_text.c_str(), stdout);
  int finished = 0;
  while (finished < o.num_samples) {
    (*engine)->Step();
    for (int i = 0; i < o.num_samples; i++) {
      std::vector<GenerationEvent> events;
      handles[i]->Wait(&events, std::chrono::milliseconds(0));
      for (const auto& e : events) {
        texts[i] += e.text;
        if (o.num_samples == 1) {
          std::fputs(e.text.c_str(), stdout);
          std::fflush(stdout);
        }
        finished += e.finish != FinishReason::kNone;
      }
    }
  }
  if (o.num_samples == 1) {
    std::printf("\n");
    return 0;
  }
  for (int i = 0; i < o.num_samples; i++) std::printf("-- sample %d --\n%s\n", i + 1, texts[i].c_str());
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = root.add_subcommand("generate", "Sample text from a trained run");
  sub->footer(
      "\nExample:\n  tern generate runs/demo --prompt \"And God said\" --max-tokens 100 --temperature 0.8 "
      "--seed 7\n"
      "The same seed gives the same text. --temperature 0 is greedy decoding.");
  sub->add_option("run_dir", o->run_dir, "run directory written by `tern train` (or a checkpoint)")
      ->required();
  sub->add_option("--prompt", o->prompt, "text to continue (default: start of a document)");
  sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  sub->add_option("--temperature", o->temperature, "softmax temperature; 0 = greedy")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o->top_k, "sample among the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", o->top_p, "nucleus sampling mass; 1 = off")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", o->seed, "random seed");
  sub->add_option("--samples", o->num_samples, "number of samples (generated as one batch)")
      ->check(CLI::Range(1, 256));
  sub->add_option("--device", o->device, "cpu | cpu-ref | cuda | auto");
  sub->add_option("--quantize", o->quantize, "none | int8 (int8 matmul weights, as tern serve)");
  table.Add(sub, [o] { return RunGenerate(*o); });
}

}  // namespace tern::cli
