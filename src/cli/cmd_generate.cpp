// tern generate RUN_DIR --prompt TEXT: samples through the serving engine (infer/generate.h), so the command
// line, the server and the trainer share one decode loop. Several samples are the n choices of one request.
#include <chrono>
#include <cstdio>
#include <memory>

#include "backend/registry.h"
#include "cli/command.h"
#include "cli/speculative_flags.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "infer/setup.h"
#include "infer/weights.h"
#include "registry/model_uri.h"

namespace tern::cli {
namespace {

struct GenerateOptions {
  std::string run_dir, prompt, device = "cpu", weights = "fp32", quantize;
  int max_tokens = 128, top_k = 40, num_samples = 1;
  float temperature = 0.8f, top_p = 1.0f;
  uint64_t seed = 1;
  SpeculativeOptions speculative;
  bool stats = false;
};

int Fail(const Status& st, const char* hint = "") {
  std::fprintf(stderr, "tern generate: %s%s\n", st.message().c_str(), hint);
  return 1;
}

int RunGenerate(const GenerateOptions& o) {
  auto model_path = registry::ResolveModelUri(o.run_dir);  // models:/NAME@ALIAS -> a local directory
  if (!model_path.ok()) return Fail(model_path.status());
  auto weights = LoadModelWeights(*model_path);
  if (!weights.ok())
    return Fail(weights.status(), "\n  (RUN_DIR must hold model.safetensors: the output of `tern train`)");
  auto tok = Tokenizer::Load(weights->tokenizer_path);
  if (!tok.ok()) return Fail(tok.status());
  auto backend = MakeBackend(o.device);
  if (!backend.ok()) return Fail(backend.status());
  auto quantize = o.quantize.empty() ? ParseWeights(o.weights) : ParseQuantize(o.quantize);
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

  // All samples are the n choices of one request: the prompt is prefilled once and they decode as a batch.
  ServeMetrics metrics;
  EngineSetup setup;
  setup.quantize = *quantize;
  setup.engine.max_batch = o.num_samples;
  setup.engine.max_batch_tokens = std::max(o.num_samples, 256);
  setup.engine.max_queue = o.num_samples;
  setup.engine.speculative = o.speculative;
  setup.kv_cache_mb = KvCacheMbFor(cfg, o.num_samples, cfg.block_size, setup.block_size);
  auto engine = MakeEngine(backend->get(), cfg, weights->params, &tok.value(), setup, &metrics);
  if (!engine.ok()) return Fail(engine.status());
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling = {o.temperature, o.top_k, o.top_p};
  r.seed = o.seed;
  r.n = o.num_samples;
  auto handle = (*engine)->Submit(std::move(r));
  if (!handle.ok()) return Fail(handle.status());
  // One sample streams to stdout as it is generated; several are printed in order when all are done.
  const std::string prompt_text = tok->Decode(prompt);
  if (o.num_samples == 1) std::fputs(prompt_text.c_str(), stdout);
  auto print = [&](const GenerationEvent& e) {
    if (o.num_samples > 1) return;
    std::fputs(e.text.c_str(), stdout);
    std::fflush(stdout);
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Generated> out = RunToCompletion(**engine, *handle, o.num_samples, print);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.num_samples == 1) {
    std::printf("\n");
  } else {
    for (int i = 0; i < o.num_samples; i++)
      std::printf("-- sample %d --\n%s%s\n", i + 1, prompt_text.c_str(), out[i].text.c_str());
  }
  if (o.stats) {
    std::fflush(stdout);
    const uint64_t tokens = metrics.generation_tokens, drafted = metrics.spec_draft_tokens;
    std::fprintf(
        stderr,
        "tern generate: %llu tokens in %llu forward passes, %.2f s (%.1f tokens/s incl. the prompt); "
        "draft tokens accepted %llu of %llu\n",
        static_cast<unsigned long long>(tokens),
        static_cast<unsigned long long>(metrics.forward_steps.load()), seconds, tokens / seconds,
        static_cast<unsigned long long>(metrics.spec_accepted_tokens.load()),
        static_cast<unsigned long long>(drafted));
  }
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
      ->check(CLI::Range(1, kMaxChoices));
  sub->add_option("--device", o->device, "cpu | cpu-ref | cuda | auto");
  auto* weights =
      sub->add_option("--weights", o->weights, "fp32 | bf16 | int8 | int4 matmul weights, as tern serve")
          ->capture_default_str();
  sub->add_option("--quantize", o->quantize, "the older name of --weights: none (= fp32) | int8")
      ->excludes(weights);
  AddSpeculativeOptions(sub, &o->speculative);
  sub->add_flag("--stats", o->stats,
                "after the text, one line on stderr: tokens, forward passes, tokens/s and the draft tokens "
                "accepted");
  table.Add(sub, [o] { return RunGenerate(*o); });
}

}  // namespace tern::cli
