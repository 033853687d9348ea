// `tern report` on a long run: writes a synthetic 100,000-step run (the typed writer's rows, as the trainer
// writes them: GPU fields and cost on every step, an evaluation every 1000 steps, a checkpoint every 2000),
// then times `tern report RUN_DIR` (the binary, wall and CPU) and, in this process, its phases: reading the
// rows (ReadMetricsFile), stitching them (LoadRun), the page (RenderHtml). Prints seconds and the file size;
// the targets (issue 16) are < 2 s and < 3 MB.
//
//   build/bench/report_bench [--steps 100000] [--tern build/tern] [--keep DIR]
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>

#include "metrics/run_record.h"
#include "report/html.h"
#include "report/run_data.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double Cpu() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

void WriteRun(const std::string& dir, int steps) {
  std::filesystem::create_directories(dir);
  std::ofstream out(dir + "/metrics.jsonl");
  tern::StartRecord s;
  s.model = "L12 H12 C768 V50257 T1024";
  s.device = "cuda (NVIDIA H100 80GB HBM3, sm_90, 80 GiB)";
  s.precision = "bf16";
  s.batch_size = 16;
  s.seq_len = 1024;
  s.grad_accum_steps = 4;
  s.price_per_hour = 4;
  s.peak_gflops = 989000;
  out << tern::ToJson(s).dump() << "\n";
  for (int i = 1; i <= steps; ++i) {
    tern::StepRecord r;
    r.step = i;
    r.loss = 3 + 8.0 / (1 + i / 500.0) + 0.01 * ((i * 7919) % 13);
    r.lr = 6e-4;
    r.grad_norm = 0.5 + 0.001 * (i % 97);
    r.tokens = static_cast<uint64_t>(i) * 65536;
    r.tokens_per_s = 500000 + (i % 31) * 100;
    r.mfu = 0.45;
    r.step_ms = 131 + (i % 17) * 0.1;
    r.data_wait_ms = 1.2;
    r.precision = "bf16";
    r.elapsed_s = i * 0.1311;
    r.gpu = tern::GpuRecord{97, 61.5, 650, 0.0013};
    r.cost_usd = 4 * *r.elapsed_s / 3600;
    r.usd_per_mtok = 0.0022;
    out << tern::ToJson(r).dump() << "\n";
    if (i % 1000 == 0) out << tern::ToJson(tern::EvalRecord{i, r.loss + 0.05, 900}).dump() << "\n";
    if (i % 2000 == 0) {
      tern::EventRecord c;
      c.event = "checkpoint";
      c.step = i;
      c.fields = {{"event", "checkpoint"}, {"step", i}, {"stall_ms", 40.0}, {"bytes", 1500000000}};
      out << tern::ToJson(c).dump() << "\n";
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 100000;
  std::string tern = "build/tern", keep;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--steps") steps = std::atoi(argv[i + 1]);
    if (a == "--tern") tern = argv[i + 1];
    if (a == "--keep") keep = argv[i + 1];
  }
  const std::string dir =
      keep.empty() ? (std::filesystem::temp_directory_path() / "tern_report_bench").string() : keep;
  if (!std::filesystem::exists(dir + "/metrics.jsonl")) WriteRun(dir, steps);
  const double mb = static_cast<double>(std::filesystem::file_size(dir + "/metrics.jsonl")) / 1e6;
  std::printf("run: %s, %d steps, metrics.jsonl %.1f MB\n", dir.c_str(), steps, mb);

  // In this process, phase by phase.
  // CPU seconds (a loaded machine stretches wall time, not CPU time).
  double c0 = Cpu();
  auto t0 = Clock::now();
  auto rows = tern::ReadMetricsFile(dir + "/metrics.jsonl");
  const double read_s = Cpu() - c0;
  if (!rows.ok()) {
    std::fprintf(stderr, "%s\n", rows.status().message().c_str());
    return 1;
  }
  c0 = Cpu();
  auto run = tern::report::LoadRun(dir);
  const double load_s = Cpu() - c0;
  if (!run.ok()) {
    std::fprintf(stderr, "%s\n", run.status().message().c_str());
    return 1;
  }
  auto chartjs = tern::report::ReadChartJs();
  c0 = Cpu();
  const std::string page = tern::report::RenderHtml({*run}, chartjs.ok() ? *chartjs : std::string(2000, ' '));
  const double render_s = Cpu() - c0;
  std::printf("in process, CPU: ReadMetricsFile %.3f s, LoadRun (read + stitch) %.3f s, RenderHtml %.3f s\n",
              read_s, load_s, render_s);

  // The binary, as a user runs it.
  const std::string out = dir + "/report.html";
  const std::string cmd = tern + " report " + dir + " --out " + out + " 2>/dev/null";
  rusage before{}, after{};
  getrusage(RUSAGE_CHILDREN, &before);
  t0 = Clock::now();
  const int rc = std::system(cmd.c_str());
  const double wall = Since(t0);
  getrusage(RUSAGE_CHILDREN, &after);
  if (rc != 0) {
    std::fprintf(stderr, "%s failed (%d)\n", cmd.c_str(), rc);
    return 1;
  }
  const auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  const double cpu =
      secs(after.ru_utime) - secs(before.ru_utime) + secs(after.ru_stime) - secs(before.ru_stime);
  const double html_mb = static_cast<double>(std::filesystem::file_size(out)) / 1e6;
  std::printf("tern report: %.2f s wall, %.2f s CPU, %.2f MB page (targets: < 2 s, < 3 MB)\n", wall, cpu,
              html_mb);
  if (keep.empty()) std::filesystem::remove_all(dir);
  return 0;
}
