// Helpers for the serve tests: a run directory (tokenizer trained on a small corpus, GPT-2 with random
// weights written as model.safetensors) and an engine stepped by hand until its requests finish.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "infer/adapter.h"
#include "infer/engine.h"
#include "model/init.h"
#include "model/safetensors.h"
#include "testing/files.h"

namespace tern::testing {

struct TestRun {
  TempDir dir;
  GptConfig cfg;
  std::vector<float> params;
  std::unique_ptr<Tokenizer> tok;
};

// Random weights are enough for the mechanics: every op is exercised and greedy decoding is as sensitive
// to the last bit of the logits as it gets.
inline std::unique_ptr<TestRun> MakeTestRun(int n_layer = 2, int n_embd = 64, int n_head = 2,
                                            int block_size = 128, uint64_t seed = 7) {
  auto run = std::make_unique<TestRun>();
  WriteFile(run->dir / "corpus.txt", MakeCorpus(60 * 1000));
  Status st = Tokenizer::Train({run->dir / "corpus.txt"}, run->dir / "tokenizer", 400);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto tok = Tokenizer::Load(run->dir / "tokenizer.model");
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  run->tok = std::make_unique<Tokenizer>(std::move(tok).value());
  run->cfg = GptConfig{n_layer, n_head, n_embd, run->tok->vocab_size(), block_size};
  run->params = GptInitialWeights(run->cfg, seed);
  st = WriteGptSafetensors(run->dir / "model.safetensors", run->cfg, run->params);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return run;
}

// A LoRA adapter of run's model with random A and B (B not zero, as after training: it changes greedy
// decoding), trained (as far as its fingerprint says) on run's weights.
inline LoraAdapter RandomLoraAdapter(const TestRun& run, int rank, uint8_t targets, float alpha,
                                     uint32_t seed) {
  LoraAdapter a;
  a.config = run.cfg;
  a.spec.rank = rank;
  a.spec.alpha = alpha;
  a.spec.targets = targets;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  a.params.resize(LoraParamCount(a.config, a.spec));
  for (float& x : a.params) x = u(rng);
  a.base_fingerprint = BaseFingerprint(run.cfg, run.params);
  return a;
}

// The base weights with the adapter merged in (model/lora.h's host merge): what serving it must compute.
inline std::vector<float> MergedLoraParams(const TestRun& run, const LoraAdapter& a) {
  std::vector<float> all = run.params;
  all.insert(all.end(), a.params.begin(), a.params.end());
  return MergeLoraOnHost(run.cfg, a.spec, all);
}

// What one request produced.
struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// Steps the engine (no thread) until every handle has its final event.
inline std::vector<Outcome> RunToEnd(Engine& engine,
                                     const std::vector<std::shared_ptr<RequestHandle>>& handles) {
  std::vector<Outcome> out(handles.size());
  size_t finished = 0;
  for (int guard = 0; finished < handles.size() && guard < 100000; guard++) {
    engine.Step();
    for (size_t i = 0; i < handles.size(); i++) {
      std::vector<GenerationEvent> events;
      handles[i]->Wait(&events, std::chrono::milliseconds(0));
      for (auto& e : events) {
        out[i].tokens.insert(out[i].tokens.end(), e.tokens.begin(), e.tokens.end());
        out[i].text += e.text;
        if (e.finish != FinishReason::kNone) {
          out[i].finish = e.finish;
          out[i].prompt_tokens = e.prompt_tokens;
          out[i].completion_tokens = e.completion_tokens;
          out[i].cached_tokens = e.cached_tokens;
          finished++;
        }
      }
    }
  }
  EXPECT_EQ(finished, handles.size());
  return out;
}

// The greedy completion of `prompt` by an engine of its own over `params` (run's shape and tokenizer, fp32
// weights, no adapters): what a server of those weights must answer.
inline std::string GreedyText(const TestRun& run, const std::vector<float>& params, const std::string& prompt,
                              int max_tokens) {
  auto be = MakeCpuFastBackend();
  InferenceModelOptions mo;
  mo.num_blocks = 32;
  mo.max_rows = 64;
  mo.max_seqs = 2;
  ServeMetrics metrics;
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_batch_tokens = 64;
  Engine e(InferenceModel::Create(be.get(), run.cfg, params, mo).value(), run.tok.get(), eo, &metrics);
  GenerationRequest r;
  r.prompt = run.tok->Encode(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return RunToEnd(e, {e.Submit(r).value()})[0].text;
}

}  // namespace tern::testing
