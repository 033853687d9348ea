// tern generate RUN_DIR --prompt TEXT
#include <cstdio>
#include <memory>

#include "backend/registry.h"
#include "cli/command.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "model/safetensors.h"
#include "model/sampler.h"

namespace tern::cli {
namespace {

struct GenerateOptions {
  std::string run_dir, prompt, device = "cpu";
  int max_tokens = 128, top_k = 40, num_samples = 1;
  float temperature = 0.8f, top_p = 1.0f;
  uint64_t seed = 1;
};

int RunGenerate(const GenerateOptions& o) {
  auto weights = ReadGptSafetensors(o.run_dir + "/model.safetensors");
  if (!weights.ok()) {
    std::fprintf(stderr, "tern generate: %s\n  (RUN_DIR must hold model.safetensors: the output of `tern train`)\n",
                 weights.status().message().c_str());
    return 1;
  }
  auto tok = Tokenizer::Load(o.run_dir + "/tokenizer.model");
  if (!tok.ok()) {
    std::fprintf(stderr, "tern generate: %s\n", tok.status().message().c_str());
    return 1;
  }
  auto backend = MakeBackend(o.device);
  if (!backend.ok()) {
    std::fprintf(stderr, "tern generate: %s\n", backend.status().message().c_str());
    return 1;
  }
  const GptConfig& cfg = weights->config;
  Gpt model(backend->get(), cfg, 1, cfg.block_size, Compute::kF32);
  model.SetParameters(weights->params);
  std::vector<int32_t> prompt = tok->Encode(o.prompt);
  if (prompt.empty()) prompt.push_back(tok->eos_id());
  for (int i = 0; i < o.num_samples; i++) {
    auto ids = GenerateTokens(model, prompt, o.max_tokens, {o.temperature, o.top_k, o.top_p}, o.seed + i,
                              tok->eos_id(), cfg.block_size);
    if (ids.front() == tok->eos_id()) ids.erase(ids.begin());
    if (!ids.empty() && ids.back() == tok->eos_id()) ids.pop_back();
    if (o.num_samples > 1) std::printf("-- sample %d --\n", i + 1);
    std::printf("%s\n", tok->Decode(ids).c_str());
  }
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = root.add_subcommand("generate", "Sample text from a trained run");
  sub->footer("\nExample:\n  tern generate runs/demo --prompt \"And God said\" --max-tokens 100 --temperature 0.8 --seed 7\n"
              "The same seed gives the same text. --temperature 0 is greedy decoding.");
  sub->add_option("run_dir", o->run_dir, "run directory written by `tern train`")->required();
  sub->add_option("--prompt", o->prompt, "text to continue (default: start of a document)");
  sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  sub->add_option("--temperature", o->temperature, "softmax temperature; 0 = greedy")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o->top_k, "sample among the k most likely tokens; 0 = all")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", o->top_p, "nucleus sampling mass; 1 = off")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", o->seed, "random seed");
  sub->add_option("--samples", o->num_samples, "number of samples")->check(CLI::PositiveNumber);
  sub->add_option("--device", o->device, "cpu | cpu-ref | cuda | auto");
  table.Add(sub, [o] { return RunGenerate(*o); });
}

}  // namespace tern::cli
