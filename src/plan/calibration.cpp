#include "plan/calibration.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "metrics/run_record.h"
#include "plan/json_read.h"

namespace tern::plan {
namespace {

using nlohmann::json;

Status ParseRunTimes(const json& j, const std::string& file, BenchRunTimes* r) {
  const std::string where = file + " run";
  if (!j.is_object())
    return Status::InvalidArgument(where + ": expected an object (from `tern bench --json`)");
  TERN_RETURN_IF_ERROR(Read(j, "process_start_s", where, &r->process_start_s));
  TERN_RETURN_IF_ERROR(Read(j, "backend_init_s", where, &r->backend_init_s));
  TERN_RETURN_IF_ERROR(Read(j, "peak_probe_s", where, &r->peak_probe_s));
  TERN_RETURN_IF_ERROR(Read(j, "model_init_s", where, &r->model_init_s));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "data_open_s", where, -1, &r->data_open_s));
  TERN_RETURN_IF_ERROR(Read(j, "forward_ms", where, &r->forward_ms));
  TERN_RETURN_IF_ERROR(Read(j, "sample_tokens", where, &r->sample_tokens));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "sample_ms", where, -1, &r->sample_ms));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "checkpoint_bytes", where, 0, &r->checkpoint_bytes));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "checkpoint_copy_ms", where, -1, &r->checkpoint_copy_ms));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "checkpoint_persist_ms", where, -1, &r->checkpoint_persist_ms));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "checkpoint_load_ms", where, -1, &r->checkpoint_load_ms));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "model_bytes", where, 0, &r->model_bytes));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "model_save_ms", where, -1, &r->model_save_ms));
  if (r->forward_ms <= 0 || r->model_init_s < 0) {
    return Status::InvalidArgument(
        where + ": forward_ms must be positive and times non-negative; re-run `tern bench --json`");
  }
  return Status::Ok();
}

}  // namespace

RunOverheads BenchProfile::Overheads(const GptConfig& run_model, int run_batch, int run_seq,
                                     const PlanDefaults& d) const {
  RunOverheads o = DefaultRunOverheads(d);
  if (!run) return o;
  const BenchRunTimes& t = *run;
  o.source = "measured: " + file;
  // Buffers are zero-filled when allocated, so model start-up grows with the model's whole memory.
  const bool bf16 = precision == Precision::kBf16;
  const double mem_ratio =
      static_cast<double>(GptMemoryEstimate(run_model, run_batch, run_seq, bf16).total()) /
      static_cast<double>(GptMemoryEstimate(model, batch, seq, bf16).total());
  o.startup_s =
      t.process_start_s + t.backend_init_s + t.model_init_s * mem_ratio + std::max(0.0, t.data_open_s);
  o.peak_probe_s = t.peak_probe_s;
  // Per token: a forward of batch x seq tokens against a step of batch x seq x grad_accum tokens.
  if (step_ms > 0) o.forward_fraction = t.forward_ms * grad_accum / step_ms;
  const double flops_ratio = GptFlopsPerToken(run_model, run_seq) / GptFlopsPerToken(model, seq);
  if (t.sample_tokens > 0 && t.sample_ms >= 0)
    o.sample_token_s = t.sample_ms / 1e3 / t.sample_tokens * flops_ratio;
  if (t.checkpoint_bytes > 0 && t.checkpoint_copy_ms >= 0) {
    o.state_copy_gb_per_s = t.checkpoint_bytes / (std::max(t.checkpoint_copy_ms, 1e-3) / 1e3) / 1e9;
  }
  if (t.checkpoint_bytes > 0 && t.checkpoint_persist_ms > 0) {
    o.ckpt_write_gb_per_s = t.checkpoint_bytes / (t.checkpoint_persist_ms / 1e3) / 1e9;
  }
  if (t.model_bytes > 0 && t.model_save_ms > 0)
    o.model_write_gb_per_s = t.model_bytes / (t.model_save_ms / 1e3) / 1e9;
  return o;
}

RestartOverhead RestartFor(const BenchProfile* bench, bool applies, const GptConfig& run_model, int run_batch,
                           int run_seq, bool probe_peak, double state_bytes, const PlanDefaults& d) {
  RestartOverhead r;
  r.seconds = d.restart_minutes * 60;
  r.source = fmt::format("default: restart_minutes {:g}", d.restart_minutes);
  if (!bench) return r;
  if (!applies) {
    r.source += fmt::format(" ({} measured {}, not this device)", bench->file,
                            bench->DeviceName().empty() ? "an unnamed GPU" : bench->DeviceName());
    return r;
  }
  const std::optional<BenchRunTimes>& t = bench->run;
  if (!t || t->checkpoint_bytes <= 0 || t->checkpoint_persist_ms <= 0 || t->checkpoint_copy_ms < 0) {
    r.source += fmt::format(" ({} has no timed start-up and save: run `tern bench --config X.yaml --json`)",
                            bench->file);
    return r;
  }
  const RunOverheads o = bench->Overheads(run_model, run_batch, run_seq, d);
  r.measured = true;
  r.startup_s = o.startup_s + (probe_peak ? o.peak_probe_s : 0);
  const bool timed_load = t->checkpoint_load_ms >= 0;
  const double load_ms =
      timed_load ? t->checkpoint_load_ms : t->checkpoint_copy_ms + t->checkpoint_persist_ms;
  r.resume_s = state_bytes / t->checkpoint_bytes * load_ms / 1e3;
  r.seconds = r.startup_s + r.resume_s;
  r.source = fmt::format("measured: {} (start-up {:.2f} s + resume {:.2f} s, {})", bench->file, r.startup_s,
                         r.resume_s, timed_load ? "a timed load" : "taken as one save: an older bench");
  return r;
}

Result<BenchProfile> ParseBenchJson(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: not JSON ({}); expected the output of `tern bench --json`", file, e.what()));
  }
  if (!j.is_object())
    return Status::InvalidArgument(
        fmt::format("{}: expected one JSON object from `tern bench --json`", file));
  TERN_RETURN_IF_ERROR(CheckRecordVersion(j, file).status());  // a newer bench's file is refused, not guessed
  BenchProfile b;
  b.file = file;
  TERN_RETURN_IF_ERROR(Need(j, "model", file));
  const json& m = j["model"];
  TERN_RETURN_IF_ERROR(Read(m, "n_layer", file + " model", &b.model.n_layer));
  TERN_RETURN_IF_ERROR(Read(m, "n_head", file + " model", &b.model.n_head));
  TERN_RETURN_IF_ERROR(Read(m, "n_embd", file + " model", &b.model.n_embd));
  TERN_RETURN_IF_ERROR(Read(m, "vocab_size", file + " model", &b.model.vocab_size));
  TERN_RETURN_IF_ERROR(Read(m, "block_size", file + " model", &b.model.block_size));
  TERN_RETURN_IF_ERROR(Read(j, "batch", file, &b.batch));
  TERN_RETURN_IF_ERROR(Read(j, "seq", file, &b.seq));
  std::string precision;
  TERN_RETURN_IF_ERROR(Read(j, "precision", file, &precision));
  if (precision == "bf16")
    b.precision = Precision::kBf16;
  else if (precision == "fp32")
    b.precision = Precision::kFp32;
  else
    return Status::InvalidArgument(
        fmt::format("{}: precision '{}' is neither fp32 nor bf16", file, precision));
  TERN_RETURN_IF_ERROR(Read(j, "device", file, &b.device));
  if (b.device != "cpu" && b.device != "cuda") {
    return Status::InvalidArgument(fmt::format("{}: device '{}' is neither cpu nor cuda", file, b.device));
  }
  // `gpu` names the catalog GPU the run was on. When it is null but the device's own name is there
  // (an older catalog mapping, or a hand-edited file), map the name here; when neither names a catalog
  // GPU the profile still calibrates --instance local, but no catalog row.
  if (j.contains("gpu_name") && j["gpu_name"].is_string()) b.gpu_name = j["gpu_name"].get<std::string>();
  if (j.contains("gpu") && j["gpu"].is_string()) b.gpu = j["gpu"].get<std::string>();
  if (b.gpu.empty() && b.device == "cuda") b.gpu = CatalogGpuId(b.gpu_name);
  if (j.contains("threads") && j["threads"].is_number_integer()) b.threads = j["threads"].get<int>();
  if (j.contains("grad_accum") && !j["grad_accum"].is_null())
    TERN_RETURN_IF_ERROR(Read(j, "grad_accum", file, &b.grad_accum));
  if (b.grad_accum < 1)
    return Status::InvalidArgument(fmt::format("{}: grad_accum must be at least 1", file));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "step_ms", file, 0, &b.step_ms));
  if (j.contains("memory") && j["memory"].is_object() && j["memory"].contains("recompute")) {
    const auto& r = j["memory"]["recompute"];
    auto mode = r.is_string() ? ParseRecompute(r.get<std::string>())
                              : Result<Recompute>(Status::InvalidArgument("not text"));
    if (!mode.ok())
      return Status::InvalidArgument(
          fmt::format("{}: memory.recompute must be none, gelu or blocks (train.recompute)", file));
    b.recompute = *mode;
  }
  if (j.contains("run") && !j["run"].is_null()) {
    BenchRunTimes t;
    TERN_RETURN_IF_ERROR(ParseRunTimes(j["run"], file, &t));
    b.run = t;
  }
  TERN_RETURN_IF_ERROR(Read(j, "tokens_per_s", file, &b.tokens_per_s));
  TERN_RETURN_IF_ERROR(Read(j, "flops_per_token", file, &b.flops_per_token));
  TERN_RETURN_IF_ERROR(Read(j, "achieved_tflops", file, &b.achieved_tflops));
  TERN_RETURN_IF_ERROR(Read(j, "peak_tflops", file, &b.peak_tflops));
  TERN_RETURN_IF_ERROR(Read(j, "mfu", file, &b.mfu));
  if (!(b.mfu > 0 && b.mfu <= 1))
    return Status::InvalidArgument(fmt::format("{}: mfu {} is outside (0, 1]", file, b.mfu));
  if (!(b.peak_tflops > 0))
    return Status::InvalidArgument(fmt::format("{}: peak_tflops must be positive", file));
  return b;
}

Result<BenchProfile> LoadBenchJson(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext("--calibrate");
  return ParseBenchJson(text.value(), path);
}

Status AddLocalDevice(GpuSpec spec, const std::string& file, double price_per_hour, double mem_gib,
                      Catalog* cat) {
  if (mem_gib <= 0)
    return Status::InvalidArgument("--instance local: cannot tell the device memory; pass --local-mem-gib");
  InstanceOffer o;
  o.provider = "local";
  o.region = "-";
  o.instance_type = "local";
  o.gpu_count = 1;
  o.where = file + ": ";
  o.price_ondemand_hr = std::max(0.0, price_per_hour);
  spec.vendor = "local";
  spec.source = file;
  spec.mem_gib = mem_gib;
  spec.where = o.where;
  o.gpu = spec.name;
  o.gpu_mem_gib = mem_gib;
  cat->gpus.push_back(spec);
  o.gpu_index = static_cast<int>(cat->gpus.size() - 1);
  cat->offers.push_back(o);
  return Status::Ok();
}

Status AddLocalInstance(const BenchProfile& b, double price_per_hour, double mem_gib, Catalog* cat) {
  // The local device is what the bench measured: its own spec, so that the peak is the bench's
  // (e.g. the CPU's, or a GPU the catalog does not sell).
  GpuSpec spec;
  spec.name = b.device == "cpu" ? "cpu" : b.gpu.empty() ? "local-cuda" : "local-" + b.gpu;
  spec.form_factor = b.device;
  spec.generation = b.device == "cpu" ? GpuGeneration::kCpu : GenerationOf(b.gpu);
  if (b.precision == Precision::kBf16) {
    spec.bf16_tflops = b.peak_tflops;
    spec.tf32_tflops = b.peak_tflops;  // marks bf16 as supported
  } else {
    spec.fp32_tflops = b.peak_tflops;
  }
  if (mem_gib <= 0 && b.device == "cuda") {
    if (const GpuSpec* g = cat->FindGpu(b.gpu)) mem_gib = g->mem_gib;
  }
  return AddLocalDevice(spec, b.file, price_per_hour, mem_gib, cat);
}

double HostMemoryGib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb / (1024.0 * 1024.0);
  }
  return 0;
}

}  // namespace tern::plan
