// Multiple-choice scoring (tern eval --choices, eval.choices): each item's context run once with its endings
// attending to its cached keys and values, against every ending run with its whole context (the baseline, the
// same numbers bit for bit). HellaSwag-like items: a context of --ctx tokens and 4 endings of --ending
// tokens, on a randomly initialised model of the given shape; the two alternate --reps times, median of each.
//
//   build/bench/choices_bench --layers 12 --embd 768 --heads 12 --items 64 --ctx 48 --ending 20
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "backend/registry.h"
#include "core/cpu_info.h"
#include "data/tokenizer.h"
#include "infer/evaluate.h"
#include "model/init.h"
#include "testing/files.h"

int main(int argc, char** argv) {
  CLI::App app("tern choices bench: shared contexts vs whole sequences");
  int layers = 12, embd = 768, heads = 12, items_n = 64, ctx_tokens = 48, ending_tokens = 20, reps = 3;
  std::string weights = "fp32";
  app.add_option("--layers", layers);
  app.add_option("--embd", embd);
  app.add_option("--heads", heads);
  app.add_option("--items", items_n);
  app.add_option("--ctx", ctx_tokens, "context tokens per item (about)");
  app.add_option("--ending", ending_tokens, "tokens per ending (about)");
  app.add_option("--weights", weights, "fp32 | bf16 | int8");
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "tern_choices_bench";
  fs::create_directories(dir);
  tern::testing::WriteFile((dir / "corpus.txt").string(), tern::testing::MakeCorpus(400 * 1000));
  if (auto st = tern::Tokenizer::Train({(dir / "corpus.txt").string()}, (dir / "tok").string(), 900);
      !st.ok()) {
    fmt::print(stderr, "{}\n", st.ToString());
    return 1;
  }
  auto tok = tern::Tokenizer::Load((dir / "tok.model").string());
  auto q = tern::ParseWeights(weights);
  if (!tok.ok() || !q.ok()) return 1;
  const tern::GptConfig cfg{layers, heads, embd, tok->vocab_size(), 1024};
  const auto params = tern::GptInitialWeights(cfg, 1);
  // Items: text cut to about the wanted token counts.
  const std::string text = tern::testing::MakeCorpus(200 * 1000, 2);
  const auto all = tok->Encode(text);
  std::vector<tern::ChoiceItem> items;
  size_t at = 0;
  auto take = [&](int n) {
    std::vector<int32_t> t(all.begin() + at, all.begin() + at + n);
    at = (at + n) % (all.size() - 4096);
    return tok->Decode(t);
  };
  int64_t ctx_sum = 0, end_sum = 0;
  for (int i = 0; i < items_n; i++) {
    tern::ChoiceItem it;
    it.context = take(ctx_tokens);
    for (int e = 0; e < 4; e++) it.endings.push_back(take(ending_tokens));
    it.label = i % 4;
    ctx_sum += tok->Encode(it.context).size();
    for (const auto& e : it.endings) end_sum += tok->Encode(e).size();
    items.push_back(std::move(it));
  }
  auto be = tern::MakeCpuFastBackend();
  std::vector<double> shared_s, whole_s;
  for (int r = 0; r < reps; r++) {
    for (bool share : {false, true}) {
      const auto t0 = std::chrono::steady_clock::now();
      auto res = tern::ScoreChoices(be.get(), cfg, params, *tok, items, *q, nullptr, share);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!res.ok()) {
        fmt::print(stderr, "{}\n", res.status().ToString());
        return 1;
      }
      (share ? shared_s : whole_s).push_back(s);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double ws = median(whole_s), ss = median(shared_s);
  const tern::CpuInfo cpu = tern::ReadCpuInfo();
  std::string isa;
  for (const auto& x : cpu.isa) isa += (isa.empty() ? "" : " ") + x;
  fmt::print(
      "{} ({}; {} CPUs) | L{} C{} V{} {} weights | {} items, context {:.1f} tokens, endings {:.1f} tokens "
      "(x4)\n",
      cpu.model, isa, cpu.logical_cpus, layers, embd, cfg.vocab_size, weights, items_n,
      static_cast<double>(ctx_sum) / items_n, static_cast<double>(end_sum) / (4.0 * items_n));
  fmt::print("whole sequences {:.3f} s, shared contexts {:.3f} s: {:.2f}x (median of {})\n", ws, ss, ws / ss,
             reps);
  fs::remove_all(dir);
  return 0;
}
