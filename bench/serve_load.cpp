// serve_load: a load generator for `tern serve` (bench/serve_load.sh drives it).
//
//   serve_load --url http://127.0.0.1:8080 --streams 1,4,16,32 --prompt-tokens 32 --max-tokens 64
//
// For each concurrency level, that many client threads send streaming completions back to back (closed
// loop: a client sends its next request when the previous one ends), each with a fresh random token-id
// prompt (so the prefix cache does not flatter the numbers) and ignore_eos, so every request generates
// exactly --max-tokens tokens. Reported per level: aggregate generated tokens/s over the wall time, the
// per-stream decode rate, time to first token p50/p99, and from the server's /metrics the engine's steps/s,
// mean batch and milliseconds per step by phase (schedule / forward / sample / emit).
//
//   serve_load make-run --shape 12,12,768,50257,1024 --tokenizer T --out DIR
// writes a run directory with random weights of that shape (L,H,C,V,T) for speed tests.
//
//   serve_load forward --run RUN_DIR --quantize int8 --rows 1,4,16,32
// the engine's forward alone (no HTTP): ms per decode step with that many sequences of --context tokens,
// tokens/s, and the time per op, to tell the model's scaling from the server's overheads.
//
//   serve_load quality --run RUN_DIR --data PREPARED_DIR
// the quality cost of int8: mean cross-entropy of the serving model on the validation shard, fp32 vs int8
// (windows of the model's context, every position scored, as the trainer's validation loss).
#include <httplib.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "data/loader.h"
#include "decode_steps.h"
#include "infer/inference_model.h"
#include "infer/setup.h"
#include "infer/weights.h"
#include "model/init.h"
#include "model/safetensors.h"

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct Options {
  std::string url = "http://127.0.0.1:8080", api_key, model;
  std::vector<int> streams = {1, 4, 16, 32};
  int prompt_tokens = 32, max_tokens = 64, requests_per_stream = 3, vocab = 256;
  std::vector<double> rates;  // open loop: Poisson arrivals at each mean rate (requests/s) instead of streams
  int requests = 24;          // open loop: requests sent per rate
  bool json_out = false;
};

struct RequestResult {
  bool ok = false;
  double ttft = 0, total = 0;  // seconds
  int tokens = 0;
};

RequestResult OneRequest(const Options& o, httplib::Client& cli, std::mt19937_64& rng) {
  json prompt = json::array();
  for (int i = 0; i < o.prompt_tokens; i++) prompt.push_back(3 + static_cast<int>(rng() % (o.vocab - 3)));
  json body = {{"prompt", prompt},   {"max_tokens", o.max_tokens},
               {"temperature", 0},   {"stream", true},
               {"ignore_eos", true}, {"stream_options", {{"include_usage", true}}}};
  if (!o.model.empty()) body["model"] = o.model;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  if (!o.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + o.api_key);
  req.body = body.dump();
  RequestResult r;
  std::string buffer;
  const auto t0 = Clock::now();
  bool first = true;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      // The client shares the machine with the server: parse only the chunks it needs (the first, and the
      // usage chunk at the end), so that its own CPU time takes as little from the server as it can.
      if (!first && event.find("\"usage\":{") == std::string::npos) continue;
      json chunk = json::parse(event.substr(6), nullptr, false);
      if (chunk.is_discarded()) continue;
      if (first &&
          !chunk["choices"].empty()) {  // the first token's chunk (text may be empty for a byte token)
        r.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
        first = false;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object())
        r.tokens = chunk["usage"]["completion_tokens"];
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  r.ok = cli.send(req, res, err) && res.status == 200 && r.tokens > 0;
  r.total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!r.ok)
    std::fprintf(stderr, "serve_load: request failed: status %d, %s\n", res.status,
                 httplib::to_string(err).c_str());
  return r;
}

// The engine's counters from GET /metrics (docs/serving.md): forward steps, batch sizes, and the engine
// thread's seconds per phase. Differences between two scrapes say where a load level's time went.
struct EngineCounters {
  double steps = 0, batch_sum = 0, batch_count = 0;
  std::map<std::string, double> phase_s;  // schedule, forward, sample, emit
};

EngineCounters Scrape(const Options& o) {
  EngineCounters c;
  httplib::Client cli(o.url);
  httplib::Headers headers;
  if (!o.api_key.empty()) headers.emplace("Authorization", "Bearer " + o.api_key);
  auto res = cli.Get("/metrics", headers);
  if (!res || res->status != 200) return c;
  std::istringstream in(res->body);
  std::string line;
  const std::string phase = "tern_engine_seconds_total{phase=\"";
  while (std::getline(in, line)) {
    const size_t sp = line.rfind(' ');
    if (line.empty() || line[0] == '#' || sp == std::string::npos) continue;
    const double v = std::atof(line.c_str() + sp + 1);
    if (line.rfind("tern_forward_steps_total ", 0) == 0) c.steps = v;
    if (line.rfind("tern_batch_size_sum ", 0) == 0) c.batch_sum = v;
    if (line.rfind("tern_batch_size_count ", 0) == 0) c.batch_count = v;
    if (line.rfind(phase, 0) == 0)
      c.phase_s[line.substr(phase.size(), line.find('"', phase.size()) - phase.size())] = v;
  }
  return c;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

int RunLoad(const Options& o) {
  if (!o.json_out)
    std::printf(
        "| streams | requests | tokens | wall s | agg tok/s | per-stream tok/s | TTFT p50 ms | TTFT p99 ms "
        "| steps/s | batch | engine ms/step: schedule / forward / sample / emit |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  json rows = json::array();
  // Closed loop: a level is a number of streams. Open loop (--rate): a level is a mean arrival rate, the
  // requests arriving as a Poisson process (exponential gaps), each on its own connection, whatever the
  // server's progress: the load `tern plan --serve` models (bench/serve_plan_accuracy.sh).
  const bool open_loop = !o.rates.empty();
  const size_t levels = open_loop ? o.rates.size() : o.streams.size();
  for (size_t level = 0; level < levels; level++) {
    const int n = open_loop ? 0 : o.streams[level];
    std::vector<RequestResult> results;
    std::mutex mu;
    std::atomic<int> failures{0};
    EngineCounters before = Scrape(o);
    const auto t0 = Clock::now();
    std::vector<std::thread> clients;
    if (open_loop) {
      std::mt19937_64 arrivals(7 + level);
      std::exponential_distribution<double> gap(o.rates[level]);
      auto next = Clock::now();
      for (int i = 0; i < o.requests; i++) {
        std::this_thread::sleep_until(next);
        clients.emplace_back([&, i] {
          httplib::Client cli(o.url);
          cli.set_read_timeout(600, 0);
          cli.set_write_timeout(60, 0);
          std::mt19937_64 rng(100000 + i);
          RequestResult r = OneRequest(o, cli, rng);
          if (!r.ok) failures++;
          std::lock_guard<std::mutex> lock(mu);
          results.push_back(r);
        });
        next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(arrivals)));
      }
    } else {
      for (int c = 0; c < n; c++) {
        clients.emplace_back([&, c] {
          httplib::Client cli(o.url);
          cli.set_read_timeout(600, 0);
          cli.set_write_timeout(60, 0);
          std::mt19937_64 rng(1000 * n + c);
          for (int i = 0; i < o.requests_per_stream; i++) {
            RequestResult r = OneRequest(o, cli, rng);
            if (!r.ok) failures++;
            std::lock_guard<std::mutex> lock(mu);
            results.push_back(r);
          }
        });
      }
    }
    for (auto& t : clients) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    EngineCounters after = Scrape(o);
    const double steps = after.steps - before.steps;
    const double batch =
        (after.batch_sum - before.batch_sum) / std::max(1.0, after.batch_count - before.batch_count);
    json phases = json::object();
    std::string phase_text;
    for (const char* p : {"schedule", "forward", "sample", "emit"}) {
      const double ms = 1000 * (after.phase_s[p] - before.phase_s[p]) / std::max(1.0, steps);
      phases[p] = ms;
      phase_text += fmt::format("{}{:.2f}", phase_text.empty() ? "" : " / ", ms);
    }
    std::vector<double> ttft, decode_rates;
    int64_t tokens = 0;
    for (const auto& r : results) {
      if (!r.ok) continue;
      ttft.push_back(r.ttft);
      tokens += r.tokens;
      if (r.total > r.ttft && r.tokens > 1) decode_rates.push_back((r.tokens - 1) / (r.total - r.ttft));
    }
    double per_stream = 0;
    for (double d : decode_rates) per_stream += d / decode_rates.size();
    std::vector<double> tpot;  // each request's decode time per token after its first, ms
    for (const auto& r : results)
      if (r.ok && r.total > r.ttft && r.tokens > 1)
        tpot.push_back(1000 * (r.total - r.ttft) / (r.tokens - 1));
    double tpot_mean = 0;
    for (double t : tpot) tpot_mean += t / tpot.size();
    json row = {{"streams", n},
                {"rate", open_loop ? o.rates[level] : 0.0},
                {"tpot_mean_ms", tpot_mean},
                {"requests", results.size()},
                {"failed", failures.load()},
                {"tokens", tokens},
                {"wall_s", wall},
                {"agg_tokens_per_s", tokens / wall},
                {"per_stream_tokens_per_s", per_stream},
                {"ttft_p50_ms", 1000 * Percentile(ttft, 0.5)},
                {"ttft_p99_ms", 1000 * Percentile(ttft, 0.99)},
                {"steps_per_s", steps / wall},
                {"mean_batch", batch},
                {"engine_ms_per_step", phases}};
    rows.push_back(row);
    if (!o.json_out)
      std::printf("| %s | %zu | %lld | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.1f | %s |\n",
                  open_loop ? fmt::format("{:g}/s", o.rates[level]).c_str() : fmt::format("{}", n).c_str(),
                  results.size(), static_cast<long long>(tokens), wall, tokens / wall, per_stream,
                  1000 * Percentile(ttft, 0.5), 1000 * Percentile(ttft, 0.99), steps / wall, batch,
                  phase_text.c_str());
    std::fflush(stdout);
  }
  // Per level, the median aggregate rate over its runs and its ratio to one stream's: on a machine whose
  // speed drifts, interleaved levels (--streams 1,16,1,16,1,16) make these ratios comparable.
  std::map<int, std::vector<double>> rates;
  for (const auto& row : rows)
    rates[row["streams"].get<int>()].push_back(row["agg_tokens_per_s"].get<double>());
  json summary = json::array();
  std::string text;
  const double one = rates.count(1) ? Percentile(rates[1], 0.5) : 0.0;
  for (auto& [n, r] : rates) {
    const double median = Percentile(r, 0.5);
    json level = {{"streams", n}, {"runs", r.size()}, {"median_agg_tokens_per_s", median}};
    if (one > 0) level["vs_one_stream"] = median / one;
    summary.push_back(level);
    text += fmt::format("{}{} stream{} {:.1f} tok/s", text.empty() ? "" : "; ", n, n == 1 ? "" : "s", median);
    if (one > 0 && n != 1) text += fmt::format(" ({:.2f}x one stream)", median / one);
    if (r.size() > 1) text += fmt::format(" (median of {})", r.size());
  }
  if (o.json_out) {
    std::printf("%s\n", json{{"levels", rows}, {"summary", summary}}.dump(2).c_str());
  } else {
    std::printf("\nmedian aggregate: %s\n", text.c_str());
  }
  return 0;
}

int MakeRun(const std::string& shape, const std::string& tokenizer, const std::string& out) {
  const std::optional<tern::GptConfig> parsed = tern::bench::ParseShape(shape);
  if (!parsed) {
    std::fprintf(stderr, "serve_load make-run: --shape wants L,H,C,V,T (e.g. 12,12,768,50257,1024)\n");
    return 2;
  }
  const tern::GptConfig cfg = *parsed;
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(tokenizer, out + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  tern::Status st =
      tern::WriteGptSafetensors(out + "/model.safetensors", cfg, tern::GptInitialWeights(cfg, 1));
  if (!st.ok()) {
    std::fprintf(stderr, "serve_load make-run: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("wrote %s (%s, random weights)\n", out.c_str(), cfg.ToString().c_str());
  return 0;
}

// Mean next-token cross-entropy over up to max_windows validation windows of T tokens.
tern::Result<double> ValLoss(tern::Backend* be, const tern::ModelWeights& w, tern::Quantize q,
                             tern::DType kv_dtype, const std::vector<std::string>& shards, int max_windows) {
  const int T = w.config.block_size, V = w.config.vocab_size, bs = 16;
  tern::InferenceModelOptions mo;
  mo.quantize = q;
  mo.kv_dtype = kv_dtype;
  mo.block_size = bs;
  mo.num_blocks = (T + bs - 1) / bs;
  mo.max_rows = T;
  mo.max_seqs = 1;
  mo.max_logit_rows = T;
  TERN_ASSIGN_OR_RETURN(auto model, tern::InferenceModel::Create(be, w.config, w.params, mo));
  TERN_ASSIGN_OR_RETURN(auto loader, tern::DataLoader::Open(shards, 1, T, 0, false));
  const int windows = std::min<int>(max_windows, static_cast<int>(loader->windows_per_epoch()));
  tern::ForwardBatch b;
  for (int t = 0; t < T; t++) {
    b.positions.push_back(t);
    b.slots.push_back(t);  // blocks 0, 1, ... in order
    b.logit_rows.push_back(t);
  }
  b.seqs = {0, T, T};
  for (int i = 0; i < model->max_blocks_per_seq(); i++) b.block_tables.push_back(i);
  double total = 0;
  tern::Batch batch;
  for (int win = 0; win < windows; win++) {
    TERN_RETURN_IF_ERROR(loader->Next(&batch));
    b.tokens = batch.inputs;
    const float* logits = model->Forward(b);
    for (int t = 0; t < T; t++) {
      const float* l = logits + static_cast<size_t>(t) * V;
      const double mx = *std::max_element(l, l + V);
      double sum = 0;
      for (int v = 0; v < V; v++) sum += std::exp(l[v] - mx);
      total += mx + std::log(sum) - l[batch.targets[t]];
    }
  }
  std::printf("  weights %s, KV %s: %d windows of %d tokens, mean loss %.6f\n", tern::QuantizeName(q),
              tern::KvDtypeName(kv_dtype), windows, T, total / (static_cast<double>(windows) * T));
  return total / (static_cast<double>(windows) * T);
}

// Decode steps of S sequences (one row each) over a KV cache already holding `context` tokens of each.
int ForwardBench(const std::string& run, const std::string& quantize, const std::string& kv_dtype,
                 const std::vector<int>& rows, int context, int steps, int top_ops) {
  auto w = tern::LoadModelWeights(run);
  auto q = tern::ParseQuantize(quantize);
  auto kv = q.ok() ? tern::ParseKvDtype(kv_dtype, *q) : tern::Result<tern::DType>(q.status());
  if (!w.ok() || !q.ok() || !kv.ok()) {
    std::fprintf(stderr, "serve_load forward: %s\n",
                 (!w.ok()   ? w.status()
                  : !q.ok() ? q.status()
                            : kv.status())
                     .message()
                     .c_str());
    return 1;
  }
  const int max_s = *std::max_element(rows.begin(), rows.end()), bs = 16;
  context = std::min(context, w->config.block_size - steps);
  const int per_seq = (context + steps + bs - 1) / bs;
  tern::InferenceModelOptions mo;
  mo.quantize = *q;
  mo.kv_dtype = *kv;
  mo.block_size = bs;
  mo.num_blocks = max_s * per_seq;
  mo.max_rows = std::max(max_s, context);
  mo.max_seqs = max_s;
  auto be = tern::MakeCpuFastBackend();
  auto model = tern::InferenceModel::Create(be.get(), w->config, w->params, mo);
  if (!model.ok()) {
    std::fprintf(stderr, "serve_load forward: %s\n", model.status().message().c_str());
    return 1;
  }
  tern::InferenceModel& m = **model;
  tern::bench::DecodeSequences seqs(m, per_seq);
  seqs.Prefill(max_s, context);  // every sequence's cache holds `context` tokens
  std::printf("%s, weights %s, KV %s, %d threads, context %d: decode steps\n\n", w->config.ToString().c_str(),
              quantize.c_str(), kv_dtype.c_str(), omp_get_max_threads(), context);
  std::printf("| rows | ms/step | tok/s | vs 1 row | top ops (ms/step) |\n|---:|---:|---:|---:|---|\n");
  double one_row_rate = 0;
  for (int S : rows) {
    std::map<std::string, double> ops;
    double total = 0;
    for (int round = 0; round < 2;
         round++) {  // round 0 warms up (and times the ops), round 1 times the steps
      m.set_profile(round == 0 ? &ops : nullptr);
      const auto t0 = Clock::now();
      for (int step = 0; step < steps; step++) m.Forward(seqs.Step(S, context + step));
      total = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    m.set_profile(nullptr);
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [op, sec] : ops) sorted.emplace_back(sec, op);
    std::sort(sorted.rbegin(), sorted.rend());
    std::string top;
    for (size_t i = 0; i < std::min<size_t>(top_ops, sorted.size()); i++)
      top += fmt::format("{}{} {:.2f}", top.empty() ? "" : ", ", sorted[i].second,
                         1000 * sorted[i].first / steps);
    const double rate = S * steps / total;
    if (S == 1) one_row_rate = rate;
    std::printf("| %d | %.2f | %.0f | %s | %s |\n", S, 1000 * total / steps, rate,
                one_row_rate > 0 ? fmt::format("{:.1f}x", rate / one_row_rate).c_str() : "", top.c_str());
  }
  return 0;
}

int Quality(const std::string& run, const std::string& data, int windows) {
  auto w = tern::LoadModelWeights(run);
  auto shards = tern::FindShards(data, "val");
  if (!w.ok() || !shards.ok()) {
    std::fprintf(stderr, "serve_load quality: %s\n",
                 (!w.ok() ? w.status() : shards.status()).message().c_str());
    return 1;
  }
  auto be = tern::MakeCpuFastBackend();
  // The baseline is the training forward's arithmetic (fp32 weights, fp32 cache); each serving choice is
  // reported against it.
  struct Variant {
    tern::Quantize q;
    tern::DType kv;
  };
  const Variant variants[] = {
      {tern::Quantize::kNone, tern::DType::kF32},  {tern::Quantize::kNone, tern::DType::kBF16},
      {tern::Quantize::kInt8, tern::DType::kF32},  {tern::Quantize::kInt8, tern::DType::kBF16},
      {tern::Quantize::kNone, tern::DType::kI8},   {tern::Quantize::kInt8, tern::DType::kI8},
      {tern::Quantize::kBF16, tern::DType::kBF16}, {tern::Quantize::kInt4, tern::DType::kBF16}};
  std::vector<double> loss;
  for (const Variant& v : variants) {
    if (v.q == tern::Quantize::kInt4 && !be->capabilities().int4_weights) {
      loss.push_back(std::nan(""));  // no AVX-512 VNNI: printed as nan
      continue;
    }
    auto l = ValLoss(be.get(), *w, v.q, v.kv, *shards, windows);
    if (!l.ok()) {
      std::fprintf(stderr, "serve_load quality: %s\n", l.status().message().c_str());
      return 1;
    }
    loss.push_back(*l);
  }
  std::printf(
      "\nval loss of %s\n\n| weights | KV cache | val loss | delta vs fp32/fp32 | perplexity |\n"
      "|---|---|---:|---:|---:|\n",
      w->config.ToString().c_str());
  for (size_t i = 0; i < loss.size(); i++)
    std::printf("| %s | %s | %.5f | %+.5f (%+.3f%%) | %.3f |\n", tern::WeightsName(variants[i].q),
                tern::KvDtypeName(variants[i].kv), loss[i], loss[i] - loss[0],
                100 * (loss[i] - loss[0]) / loss[0], std::exp(loss[i]));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Load generator for tern serve: aggregate tokens/s and time to first token at several concurrencies"};
  Options o;
  app.add_option("--url", o.url, "server base URL")->capture_default_str();
  app.add_option("--api-key", o.api_key, "bearer token, if the server wants one");
  app.add_option("--model", o.model, "model name to send (default: none, the served one)");
  app.add_option("--streams", o.streams, "concurrency levels")->delimiter(',')->capture_default_str();
  app.add_option("--prompt-tokens", o.prompt_tokens, "prompt length (random token ids)")
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "tokens generated per request")->capture_default_str();
  app.add_option("--requests-per-stream", o.requests_per_stream, "requests each client sends")
      ->capture_default_str();
  app.add_option("--vocab", o.vocab, "prompt token ids are drawn from [3, vocab)")->capture_default_str();
  app.add_option("--rate", o.rates,
                 "open loop instead of --streams: Poisson arrivals at these mean requests/s (one level each)")
      ->delimiter(',');
  app.add_option("--requests", o.requests, "open loop: requests sent per --rate level")
      ->capture_default_str();
  app.add_flag("--json", o.json_out, "JSON {levels: rows, summary: median per level} instead of markdown");
  std::string shape, tokenizer, out;
  auto* make = app.add_subcommand("make-run", "write a run directory with random weights (for speed tests)");
  make->add_option("--shape", shape, "L,H,C,V,T")->required();
  make->add_option("--tokenizer", tokenizer, "tokenizer.model to copy")->required();
  make->add_option("--out", out, "directory")->required();
  std::string run, data;
  int windows = 1000;
  auto* quality = app.add_subcommand(
      "quality", "validation loss of the serving model: fp32/int8 weights x fp32/bf16/int8 KV cache");
  quality->add_option("--run", run, "run directory")->required();
  quality->add_option("--data", data, "prepared data directory (val_*.bin)")->required();
  quality->add_option("--windows", windows, "at most this many windows")->capture_default_str();
  std::string fwd_run, fwd_quantize = "none", fwd_kv = "fp32";
  std::vector<int> fwd_rows = {1, 4, 16, 32};
  int fwd_context = 64, fwd_steps = 20, fwd_ops = 5;
  auto* forward = app.add_subcommand("forward", "time the engine's decode forward alone (no HTTP), per op");
  forward->add_option("--run", fwd_run, "run directory")->required();
  forward->add_option("--quantize", fwd_quantize, "none | bf16 | int8 (the weights)")->capture_default_str();
  forward->add_option("--kv-dtype", fwd_kv, "auto | fp32 | bf16 | int8")->capture_default_str();
  forward->add_option("--rows", fwd_rows, "sequences per step")->delimiter(',')->capture_default_str();
  forward->add_option("--context", fwd_context, "tokens already in each sequence's cache")
      ->capture_default_str();
  forward->add_option("--steps", fwd_steps, "decode steps timed per row count")->capture_default_str();
  forward->add_option("--ops", fwd_ops, "the most expensive ops listed per row count")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (forward->parsed())
    return ForwardBench(fwd_run, fwd_quantize, fwd_kv, fwd_rows, fwd_context, fwd_steps, fwd_ops);
  if (make->parsed()) return MakeRun(shape, tokenizer, out);
  if (quality->parsed()) return Quality(run, data, windows);
  return RunLoad(o);
}
