#include "plan/serve_calibration.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "metrics/run_record.h"
#include "plan/calibration.h"
#include "plan/json_read.h"

namespace tern::plan {

namespace {

// The name of the local device's GPU spec: the fitted constants apply to it.
std::string LocalGpuName(const ServeBenchProfile& b) {
  return b.device == "cpu" ? "cpu" : "local-" + (b.gpu.empty() ? std::string("cuda") : b.gpu);
}

}  // namespace

Result<ServeBenchProfile> ParseServeBenchJson(const std::string& text, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: not JSON ({}); expected the output of `tern bench --serve --json`", file, e.what()));
  }
  if (!j.is_object())
    return Status::InvalidArgument(
        fmt::format("{}: expected one JSON object from `tern bench --serve --json`", file));
  if (!j.contains("kind") || j["kind"] != "serve")
    return Status::InvalidArgument(fmt::format(
        "{}: not a serving bench; `tern plan --serve --calibrate` reads `tern bench --serve --json` (a "
        "training bench, `tern bench --json`, calibrates `tern plan` without --serve)",
        file));
  TERN_RETURN_IF_ERROR(CheckRecordVersion(j, file).status());
  ServeBenchProfile b;
  b.file = file;
  TERN_RETURN_IF_ERROR(Need(j, "model", file));
  const nlohmann::json& m = j["model"];
  const std::string mf = file + " model";
  TERN_RETURN_IF_ERROR(Read(m, "n_layer", mf, &b.model.n_layer));
  TERN_RETURN_IF_ERROR(Read(m, "n_head", mf, &b.model.n_head));
  TERN_RETURN_IF_ERROR(Read(m, "n_embd", mf, &b.model.n_embd));
  TERN_RETURN_IF_ERROR(Read(m, "vocab_size", mf, &b.model.vocab_size));
  TERN_RETURN_IF_ERROR(Read(m, "block_size", mf, &b.model.block_size));
  if (b.model.n_layer < 1 || b.model.n_embd < 1 || b.model.vocab_size < 1 || b.model.block_size < 1)
    return Status::InvalidArgument(fmt::format("{}: the model's sizes must be positive", file));
  TERN_RETURN_IF_ERROR(Read(j, "device", file, &b.device));
  if (b.device != "cpu" && b.device != "cuda")
    return Status::InvalidArgument(fmt::format("{}: device '{}' is neither cpu nor cuda", file, b.device));
  if (j.contains("gpu_name") && j["gpu_name"].is_string()) b.gpu_name = j["gpu_name"].get<std::string>();
  if (j.contains("gpu") && j["gpu"].is_string()) b.gpu = j["gpu"].get<std::string>();
  if (b.gpu.empty() && b.device == "cuda") b.gpu = CatalogGpuId(b.gpu_name);
  TERN_RETURN_IF_ERROR(Read(j, "weights", file, &b.weights));
  TERN_RETURN_IF_ERROR(Read(j, "kv_dtype", file, &b.kv_dtype));
  if (b.weights != "fp32" && b.weights != "bf16" && b.weights != "int8" && b.weights != "int4")
    return Status::InvalidArgument(
        fmt::format("{}: weights '{}' is not fp32, bf16, int8 or int4", file, b.weights));
  if (b.kv_dtype != "fp32" && b.kv_dtype != "bf16" && b.kv_dtype != "int8")
    return Status::InvalidArgument(
        fmt::format("{}: kv_dtype '{}' is not fp32, bf16 or int8", file, b.kv_dtype));
  if (j.contains("threads") && j["threads"].is_number_integer()) b.threads = j["threads"].get<int>();
  TERN_RETURN_IF_ERROR(Read(j, "context", file, &b.context));
  TERN_RETURN_IF_ERROR(ReadOptional(j, "read_gbps", file, 0, &b.read_gbps));
  TERN_RETURN_IF_ERROR(Read(j, "peak_tflops", file, &b.peak_tflops));
  TERN_RETURN_IF_ERROR(Read(j, "prefill_ms", file, &b.prefill_ms));
  if (b.context < 1 || !(b.peak_tflops > 0) || !(b.prefill_ms > 0) || !(b.read_gbps >= 0))
    return Status::InvalidArgument(
        fmt::format("{}: context, peak_tflops and prefill_ms must be positive (read_gbps >= 0)", file));
  TERN_RETURN_IF_ERROR(Need(j, "decode", file));
  if (!j["decode"].is_array())
    return Status::InvalidArgument(fmt::format("{}: 'decode' must be a list of {{batch, ms}}", file));
  for (const auto& s : j["decode"]) {
    ServeBenchProfile::Step st;
    if (!s.is_object()) return Status::InvalidArgument(fmt::format("{}: 'decode' entries are objects", file));
    TERN_RETURN_IF_ERROR(Read(s, "batch", file + " decode", &st.batch));
    TERN_RETURN_IF_ERROR(Read(s, "ms", file + " decode", &st.ms));
    if (st.batch < 1 || !(st.ms > 0))
      return Status::InvalidArgument(fmt::format("{}: a decode step needs batch >= 1 and ms > 0", file));
    b.decode.push_back(st);
  }
  std::sort(
      b.decode.begin(), b.decode.end(),
      [](const ServeBenchProfile::Step& x, const ServeBenchProfile::Step& y) { return x.batch < y.batch; });
  if (b.decode.size() < 2 || b.decode.front().batch != 1 || b.decode[0].batch == b.decode[1].batch)
    return Status::InvalidArgument(fmt::format(
        "{}: the fit needs decode steps at batch 1 and at least one larger batch (tern bench --serve "
        "--batches 1,4,16,64)",
        file));
  return b;
}

Result<ServeBenchProfile> LoadServeBenchJson(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status().WithContext("--calibrate");
  return ParseServeBenchJson(text.value(), path);
}

Result<ServeCalibration> FitServeBench(const ServeBenchProfile& b, double bandwidth_gbps,
                                       double peak_tflops) {
  if (!(bandwidth_gbps > 0) || !(peak_tflops > 0))
    return Status::InvalidArgument(fmt::format(
        "{}: no memory bandwidth or peak to calibrate against (a CPU bench records read_gbps; a GPU's comes "
        "from gpus.csv)",
        b.file));
  // The replica model at unit efficiencies and no overhead: its memory and compute lines are the times of
  // a step at 100%, which the fitted fractions divide.
  GpuSpec spec;
  spec.name = b.DeviceName();
  spec.mem_bw_gbps = bandwidth_gbps;
  spec.fp32_tflops = spec.tf32_tflops = spec.bf16_tflops = peak_tflops;
  spec.mem_gib = 1e9;
  ServeRequest req;
  req.model = b.model;
  req.weights = b.weights;
  req.kv_dtype = b.kv_dtype;
  req.load.prompt_tokens = b.context;
  req.load.completion_tokens = 0;  // decode at the bench's context exactly
  PlanDefaults unit;
  unit.serve_bw_efficiency = unit.serve_decode_mfu = unit.serve_prefill_mfu = 1;
  unit.serve_step_overhead_ms = 0;
  std::string why;
  std::optional<ReplicaModel> r = MakeReplicaModel(spec, req, unit, &why);
  if (!r) return Status::InvalidArgument(b.file + ": " + why);
  auto mem_s = [&](double batch) {
    return (r->weight_bytes + batch * r->kv_bytes_per_token * r->ctx_mean) / r->bandwidth;
  };
  auto flop_s = [&](double batch) { return batch * r->decode_flops / r->peak_flops; };
  const auto& first = b.decode.front();
  const auto& last = b.decode.back();
  const double t1 = first.ms / 1e3, tn = last.ms / 1e3;

  ServeCalibration best;
  best.max_error = 1e30;
  for (int k = 0; k <= 190; k++) {
    const double o = t1 * k / 200;
    if (!(tn > o)) break;
    ServeCalibration c;
    c.overhead_ms = o * 1e3;
    c.bw_efficiency = mem_s(1) / (t1 - o);
    c.decode_mfu = flop_s(last.batch) / (tn - o);
    for (const auto& s : b.decode) {
      const double model = o + std::max(mem_s(s.batch) / c.bw_efficiency, flop_s(s.batch) / c.decode_mfu);
      c.points.push_back({s.batch, s.ms, model * 1e3});
      c.max_error = std::max(c.max_error, std::abs(model * 1e3 / s.ms - 1));
    }
    if (c.max_error < best.max_error) best = c;
  }
  if (best.points.empty())
    return Status::InvalidArgument(b.file +
                                   ": the decode steps admit no fit (is batch 1 slower than the largest?)");
  best.compute_bound_seen = flop_s(last.batch) / best.decode_mfu >= mem_s(last.batch) / best.bw_efficiency;
  best.device = b.DeviceName();
  best.file = b.file;
  best.prefill_mfu = r->prefill_s / (b.prefill_ms / 1e3);
  best.bandwidth_gbps = bandwidth_gbps;
  best.peak_tflops = peak_tflops;
  return best;
}

Result<ServeCalibration> CalibrateServe(const ServeBenchProfile& b, const Catalog& cat) {
  const GpuSpec* g = b.device == "cuda" && !b.gpu.empty() ? cat.FindGpu(b.gpu) : nullptr;
  if (g && g->mem_bw_gbps) {
    const std::optional<double> peak =
        g->PeakTflops(b.weights == "fp32" ? Precision::kFp32 : Precision::kBf16);
    if (peak) return FitServeBench(b, *g->mem_bw_gbps, *peak);
  }
  // The local device, against its own measured figures.
  TERN_ASSIGN_OR_RETURN(ServeCalibration c, FitServeBench(b, b.read_gbps, b.peak_tflops));
  c.device = LocalGpuName(b);
  return c;
}

Status AddLocalServeInstance(const ServeBenchProfile& b, double price_per_hour, double mem_gib,
                             Catalog* cat) {
  GpuSpec spec;
  const GpuSpec* known = b.device == "cuda" && !b.gpu.empty() ? cat->FindGpu(b.gpu) : nullptr;
  if (known) spec = *known;  // the datasheet the calibration is relative to
  spec.name = LocalGpuName(b);
  spec.form_factor = b.device;
  spec.generation = b.device == "cpu" ? GpuGeneration::kCpu : known ? known->generation : GenerationOf(b.gpu);
  if (!known) {
    spec.mem_bw_gbps = b.read_gbps;
    spec.fp32_tflops = spec.bf16_tflops = spec.tf32_tflops = b.peak_tflops;
  }
  if (mem_gib <= 0 && known) mem_gib = known->mem_gib;
  return AddLocalDevice(spec, b.file, price_per_hour, mem_gib, cat);
}

}  // namespace tern::plan
