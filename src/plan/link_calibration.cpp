#include "plan/link_calibration.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "metrics/run_record.h"
#include "plan/gpu_specs.h"
#include "plan/json_read.h"

namespace tern::plan {
namespace {

using nlohmann::json;

std::string OptionalString(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

}  // namespace

std::string LinkProfile::Describe() const {
  return fmt::format("{}: {}, {} ranks on {} node{} ({}{})", file, communicator, world, nodes,
                     nodes == 1 ? "" : "s",
                     device == "cpu" ? "cpu"
                     : gpu.empty()   ? gpu_name
                                     : gpu,
                     instance.empty() ? "" : ", " + instance);
}

bool LinkProfile::AppliesTo(const InstanceOffer& o, int row_nodes) const {
  if (device == "cpu" || gpu.empty() || gpu != o.gpu) return false;
  if (!instance.empty() && instance != o.instance_type) return false;
  const bool row_inter = row_nodes > 1, measured_inter = nodes > 1;
  if (row_inter != measured_inter) return false;
  return row_inter || o.gpu_count > 1;  // one GPU in one instance: no ring
}

bool IsDistBenchJson(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("tool") && j["tool"] == "tern bench --dist";
}

Result<LinkProfile> ParseDistBenchJson(const std::string& text, const std::string& file) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    return Status::InvalidArgument(
        fmt::format("{}: not a JSON object; expected `tern bench --dist --json`", file));
  TERN_RETURN_IF_ERROR(CheckRecordVersion(j, file).status());  // a newer bench's file is refused, not guessed
  LinkProfile p;
  p.file = file;
  // json_read.h's reader (whole numbers checked against the field's range), naming the file's maker.
  auto read = [&](const char* key, auto* out) {
    const Status st = Read(j, key, file, out);
    return st.ok() ? st : Status::InvalidArgument(st.message() + " (from `tern bench --dist --json`)");
  };
  TERN_RETURN_IF_ERROR(read("communicator", &p.communicator));
  TERN_RETURN_IF_ERROR(read("world", &p.world));
  TERN_RETURN_IF_ERROR(read("nodes", &p.nodes));
  TERN_RETURN_IF_ERROR(read("device", &p.device));
  TERN_RETURN_IF_ERROR(read("latency_us", &p.latency_us));
  TERN_RETURN_IF_ERROR(read("link_gb_per_s", &p.bus_gb_per_s));
  p.gpu = OptionalString(j, "gpu");
  p.gpu_name = OptionalString(j, "gpu_name");
  p.instance = OptionalString(j, "instance");
  if (p.gpu.empty() && p.device == "cuda") p.gpu = CatalogGpuId(p.gpu_name);
  if (j.contains("sizes") && j["sizes"].is_array() && !j["sizes"].empty() && j["sizes"].back().is_object() &&
      j["sizes"].back().contains("bytes") && j["sizes"].back()["bytes"].is_number())
    p.largest_bytes = j["sizes"].back()["bytes"].get<double>();
  if (p.world < 2) {
    return Status::InvalidArgument(fmt::format(
        "{}: measured a world of {} (one process): nothing crossed a link. Measure the ranks you will train "
        "on: mpirun -np N tern bench --dist --json (or srun -n N)",
        file, p.world));
  }
  if (p.nodes < 1 || p.nodes > p.world)
    return Status::InvalidArgument(
        fmt::format("{}: nodes {} must be in 1..world ({})", file, p.nodes, p.world));
  if (!(p.bus_gb_per_s > 0) || p.latency_us < 0) {
    return Status::InvalidArgument(fmt::format(
        "{}: link_gb_per_s must be positive and latency_us non-negative; re-run tern bench --dist", file));
  }
  return p;
}

LinkModel MeasuredLink(const LinkProfile& p, int n_gpus, bool inter_node) {
  LinkModel link;
  link.measured = true;
  link.inter_node = inter_node;
  link.gb_per_s = p.bus_gb_per_s;
  link.measured_latency_us = p.latency_us;
  link.measured_world = p.world;
  link.latency_s = p.latency_us * 1e-6 * (n_gpus - 1) / (p.world - 1);
  link.source = p.Describe();
  link.what = fmt::format("measured {:.3g} GB/s ({})", p.bus_gb_per_s, p.file);
  return link;
}

const LinkProfile* FindLinkProfile(const std::vector<LinkProfile>& profiles, const InstanceOffer& o,
                                   int nodes) {
  const LinkProfile* any = nullptr;
  for (const LinkProfile& p : profiles) {
    if (!p.AppliesTo(o, nodes)) continue;
    if (!p.instance.empty()) return &p;
    if (!any) any = &p;
  }
  return any;
}

}  // namespace tern::plan
