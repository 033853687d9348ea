// Checkpoint benchmark for the full training state of GPT-2 124M (fp32 weights + AdamW m and v):
//   1. this disk's sequential write bandwidth with fsync (the ceiling), written like `dd conv=fsync`;
//   2. a synchronous save: the training stall is the whole save;
//   3. an asynchronous save: the stall is the snapshot copy; the writer's persist time gives the throughput,
//      and training steps run meanwhile (their slowdown is the cost of sharing the machine with the writer);
//   4. resume: a fresh model, the checkpoint read, verified and restored, one step (in this process);
//   5. with --tern: time from process start to the first resumed step of `tern train --resume auto`.
// Usage: ckpt_bench [--dir DIR] [--tern PATH/tern] [--model gpt2-124m] [--json]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "ckpt/manager.h"
#include "model/gpt.h"
#include "train/train_checkpoint.h"

namespace fs = std::filesystem;
using namespace tern;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sequential write of `bytes` in 8 MiB chunks, then fsync: `dd bs=8M conv=fsync` (buffered, through the page
// cache) or `dd bs=8M oflag=direct conv=fsync` (direct, as LocalStorage writes snapshot images).
double SequentialWriteGBps(const std::string& path, size_t bytes, bool direct) {
  char* chunk = static_cast<char*>(std::aligned_alloc(4096, 8u << 20));
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < (8u << 20); i++) chunk[i] = static_cast<char>(rng());
  bytes = bytes / 4096 * 4096;
  const double t0 = Now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  for (size_t done = 0; done < bytes;) {
    ssize_t n = ::write(fd, chunk, std::min<size_t>(8u << 20, bytes - done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  const double s = Now() - t0;
  ::unlink(path.c_str());
  std::free(chunk);
  return bytes / s / 1e9;
}

// One training step on random tokens (the work the async save overlaps with). `fence` runs before the
// optimizer update, as in Trainer::Step; its time is returned in *fence_s.
double TrainStep(Gpt& model, int B, int T, std::mt19937& rng, ckpt::CheckpointManager* fence = nullptr,
                 double* fence_s = nullptr) {
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; i++) {
    x[i] = static_cast<int32_t>(rng() % model.config().vocab_size);
    y[i] = static_cast<int32_t>(rng() % model.config().vocab_size);
  }
  const double t0 = Now();
  model.ZeroGrad();
  model.Forward(x.data(), y.data(), B, T, 1.0f / (B * T));
  model.Backward();
  if (fence) {
    const double f0 = Now();
    fence->WaitForSnapshot();
    *fence_s += Now() - f0;
  }
  model.AdamWStep(1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1);
  model.backend()->Synchronize();
  return Now() - t0;
}

std::string Run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

nlohmann::json LastEvent(const std::string& metrics, const std::string& event) {
  std::ifstream in(metrics);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) last = j;
  }
  return last;
}

// `tern train` 124M for one step with a checkpoint, then resumed in a new process: seconds from that
// process's start to its first step, and the load part of it.
nlohmann::json ResumeTiming(const std::string& tern, const fs::path& dir, const GptConfig& cfg) {
  fs::create_directories(dir);
  {
    std::ofstream corpus(dir / "corpus.txt");
    const char* words[] = {"the",     "king", "walked", "toward",   "river", "and", "spoke",
                           "softly",  "to",   "a",      "stranger", "in",    "old", "city",
                           "morning", "sea",  "field",  "of",       "wheat", "gate"};
    std::mt19937 rng(3);
    for (int line = 0; line < 20000; line++) {
      for (int w = 0; w < 12; w++) corpus << words[rng() % 20] << (w == 11 ? ".\n" : " ");
    }
  }
  Run(tern + " prepare --input " + (dir / "corpus.txt").string() + " --out " + (dir / "data").string() +
      " --vocab-size 300 --threads 1");
  const std::string base =
      tern + " train " + (dir / "bench.yaml").string() +
      " --quiet --set model.n_layer=" + std::to_string(cfg.n_layer) +
      " --set model.n_head=" + std::to_string(cfg.n_head) +
      " --set model.n_embd=" + std::to_string(cfg.n_embd) +
      " --set model.vocab_size=" + std::to_string(cfg.vocab_size) +
      " --set model.block_size=" + std::to_string(cfg.block_size) +
      " --set data.dir=" + (dir / "data").string() + " --set run.dir=" + (dir / "run").string() +
      " --set train.batch_size=1 --set train.seq_len=64 --set eval.batches=1 --set eval.every=0"
      " --set sample.count=0 --set run.peak_gflops=100 --set ckpt.every=1";
  std::ofstream(dir / "bench.yaml") << "train: {steps: 1}\n";
  const std::string first_out = Run(base);
  const double t0 = Now();
  const std::string resume_out = Run(base + " --resume auto --set train.steps=2");
  const double wall = Now() - t0;
  nlohmann::json resume = LastEvent((dir / "run/metrics.jsonl").string(), "resume");
  nlohmann::json first = LastEvent((dir / "run/metrics.jsonl").string(), "resumed_first_step");
  if (resume.is_null() || first.is_null()) return {{"error", first_out + "\n---\n" + resume_out}};
  return {{"first_resumed_step_since_process_start_s", first.value("since_process_start_s", -1.0)},
          {"checkpoint_load_ms", resume.value("load_ms", -1.0)},
          {"resume_process_wall_s", wall}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/tern_ckpt_bench", tern, model_name = "gpt2-124m";
  bool json_only = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--tern" && i + 1 < argc)
      tern = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      model_name = argv[++i];
    else if (a == "--json")
      json_only = true;
  }
  auto preset = GptPreset(model_name);
  if (!preset.ok()) {
    std::fprintf(stderr, "ckpt_bench: %s\n", preset.status().message().c_str());
    return 2;
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto backend = MakeBackend("cpu");
  const int B = 1, T = 64;
  Gpt model(backend->get(), *preset, B, T, Compute::kF32);
  model.InitWeights(1);
  TrainConfig tc;
  tc.model = *preset;
  tc.batch_size = B;
  tc.seq_len = T;
  const DataIdentity data{"bench", 0, 0, ""};
  TrainProgress progress;
  auto capture = [&](ckpt::Snapshot& s) { return CaptureTrainMeta(model, tc, data, progress, &s); };
  auto copy = [&](ckpt::Snapshot& s) { return CopyModelState(model, &s); };
  const size_t state_bytes = model.num_params() * 12;
  nlohmann::json out = {{"model", model_name}, {"params", model.num_params()}, {"state_bytes", state_bytes}};
  auto say = [&](const std::string& s) {
    if (!json_only) std::fprintf(stderr, "%s\n", s.c_str());
  };

  // 1. the disk's ceiling
  const double seq = SequentialWriteGBps(dir + "/seq.bin", state_bytes, false);
  const double seq_direct = SequentialWriteGBps(dir + "/seq.bin", state_bytes, true);
  out["seq_write_fsync_GBps"] = seq;
  out["seq_write_direct_fsync_GBps"] = seq_direct;
  say(fmt::format("sequential write + fsync of {:.2f} GB: {:.2f} GB/s buffered, {:.2f} GB/s O_DIRECT",
                  state_bytes / 1e9, seq, seq_direct));

  // 2. synchronous saves: the second one is steady state (snapshot buffers allocated and faulted in)
  ckpt::ManagerOptions so;
  so.tiers = {{"fast", dir + "/sync", 0, {1, 0, 0}}};
  so.async = false;
  auto sync_mgr = ckpt::CheckpointManager::Open(so);
  if (!sync_mgr.ok()) {
    std::fprintf(stderr, "ckpt_bench: %s\n", sync_mgr.status().ToString().c_str());
    return 1;
  }
  double sync_s[2];
  for (int i = 0; i < 2; i++) {
    progress.step = i + 1;
    const double t0 = Now();
    Status st = (*sync_mgr)->Save(i + 1, {0}, "periodic", std::nullopt, capture, copy);
    sync_s[i] = Now() - t0;
    auto ev = (*sync_mgr)->TakeEvents();
    if (!st.ok() || ev.empty() || !ev[0].status.ok()) {
      std::fprintf(stderr, "ckpt_bench: sync save failed\n");
      return 1;
    }
  }
  sync_mgr->reset();
  out["sync_save_s"] = sync_s[1];
  out["sync_save_first_s"] = sync_s[0];
  say(fmt::format("synchronous save: {:.3f} s (first, allocating: {:.3f} s)", sync_s[1], sync_s[0]));

  // 3. asynchronous saves with training going on
  std::mt19937 rng(5);
  double base_step = 0;
  for (int i = 0; i < 3; i++) base_step += TrainStep(model, B, T, rng) / 3;
  ckpt::ManagerOptions ao = so;
  ao.tiers = {{"fast", dir + "/async", 0, {1, 0, 0}}};
  ao.async = true;
  auto mgr = ckpt::CheckpointManager::Open(ao);
  if (!mgr.ok()) {
    std::fprintf(stderr, "ckpt_bench: %s\n", mgr.status().ToString().c_str());
    return 1;
  }
  double stall[2] = {0, 0}, persist = 0, copy_s = 0, overlapped_step = 0;
  int overlapped = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < 2; i++) {  // the first save allocates the snapshot; the second is steady state
    progress.step = 10 + i;
    double fence_s = 0;
    const double t0 = Now();
    const Status st = (*mgr)->Save(10 + i, {0}, "periodic", std::nullopt, capture, copy);
    stall[i] = Now() - t0;
    if (!st.ok()) {
      std::fprintf(stderr, "ckpt_bench: async save failed: %s\n", st.ToString().c_str());
      return 1;
    }
    // Training continues while the writer copies and persists; the next update waits for the copy.
    do {
      overlapped_step += i == 1 ? TrainStep(model, B, T, rng, mgr->get(), &fence_s) : 0;
      overlapped += i == 1;
    } while ((*mgr)->busy() && i == 1);
    stall[i] += fence_s;
    (*mgr)->WaitIdle();
    for (const auto& e : (*mgr)->TakeEvents()) {
      if (!e.status.ok()) {
        std::fprintf(stderr, "ckpt_bench: async save failed: %s\n", e.status.ToString().c_str());
        return 1;
      }
      persist = e.persist_ms / 1e3;
      copy_s = e.copy_ms / 1e3;
      bytes = e.bytes;
    }
  }
  const double persist_gbps = bytes / persist / 1e9;
  out.update({{"async_stall_s", stall[1]},
              {"async_stall_first_s", stall[0]},
              {"async_persist_s", persist},
              {"async_copy_s", copy_s},
              {"persist_GBps", persist_gbps},
              {"stall_fraction_of_sync_save", stall[1] / sync_s[1]},
              {"persist_fraction_of_seq_write", persist_gbps / seq},
              {"persist_fraction_of_seq_write_direct", persist_gbps / seq_direct},
              {"train_step_s", base_step},
              {"train_step_during_persist_s", overlapped ? overlapped_step / overlapped : 0.0},
              {"steps_during_persist", overlapped}});
  say(fmt::format(
      "async save: stall {:.3f} s = {:.1f}% of a synchronous save (copy {:.3f} s overlapped with the "
      "next forward/backward); persist {:.3f} s = {:.2f} GB/s = {:.0f}% of buffered, {:.0f}% of direct "
      "sequential write",
      stall[1], 100 * stall[1] / sync_s[1], copy_s, persist, persist_gbps, 100 * persist_gbps / seq,
      100 * persist_gbps / seq_direct));
  say(fmt::format("training step {:.3f} s alone, {:.3f} s while the writer persists ({} steps overlapped)",
                  base_step, overlapped ? overlapped_step / overlapped : 0.0, overlapped));
  mgr->reset();

  // 4. resume in this process, as `tern train --resume auto` does once its data is open: a fresh model, the
  // newest valid checkpoint read back and verified (the images were written O_DIRECT: mostly not cached),
  // restored, and one step.
  {
    const double t0 = Now();
    Gpt fresh(backend->get(), *preset, B, T, Compute::kF32);
    const double t_alloc = Now();
    ckpt::ManagerOptions ro = ao;
    ro.async = false;
    auto rm = ckpt::CheckpointManager::Open(ro);
    if (!rm.ok()) {
      std::fprintf(stderr, "ckpt_bench: %s\n", rm.status().ToString().c_str());
      return 1;
    }
    std::vector<std::string> skipped;
    auto loaded = (*rm)->LoadNewestValid(&skipped);
    const double t_load = Now();
    if (!loaded.ok()) {
      std::fprintf(stderr, "ckpt_bench: %s\n", loaded.status().message().c_str());
      return 1;
    }
    auto restored = RestoreTrainState(*loaded, tc, data, &fresh);
    const double t_restore = Now();
    if (!restored.ok()) {
      std::fprintf(stderr, "ckpt_bench: %s\n", restored.status().message().c_str());
      return 1;
    }
    TrainStep(fresh, B, T, rng);
    const double t_step = Now();
    out["resume_in_process"] = {{"model_alloc_s", t_alloc - t0},
                                {"load_verify_s", t_load - t_alloc},
                                {"restore_s", t_restore - t_load},
                                {"first_step_s", t_step - t_restore},
                                {"to_first_step_s", t_step - t0}};
    say(fmt::format(
        "resume in-process: first step done {:.2f} s after start (model alloc {:.2f}, read+verify "
        "{:.2f}, restore {:.2f}, step {:.2f})",
        t_step - t0, t_alloc - t0, t_load - t_alloc, t_restore - t_load, t_step - t_restore));
  }

  if (!tern.empty()) {
    out["resume"] = ResumeTiming(tern, fs::path(dir) / "resume", *preset);
    if (out["resume"].contains("error"))
      say("resume timing failed:\n" + out["resume"]["error"].get<std::string>());
    else
      say(fmt::format("resume: first resumed step {:.2f} s after process start (checkpoint load {:.0f} ms)",
                      out["resume"]["first_resumed_step_since_process_start_s"].get<double>(),
                      out["resume"]["checkpoint_load_ms"].get<double>()));
  }
  std::printf("%s\n", out.dump(2).c_str());
  fs::remove_all(dir);
  return 0;
}
