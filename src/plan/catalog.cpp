#include "plan/catalog.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/file_util.h"
#include "plan/csv.h"

namespace tern::plan {
namespace {

constexpr const char* kInstanceRequired[] = {
    "provider", "region", "instance_type", "gpu", "gpu_count", "price_ondemand_hr", "price_spot_hr"};

enum class FileKind { kInstances, kGpus, kNetwork, kUnknown };

FileKind KindOf(const CsvTable& t) {
  if (t.Has("network_gbps") && t.Has("instance_type")) return FileKind::kNetwork;
  if (t.Has("instance_type") || t.Has("price_ondemand_hr")) return FileKind::kInstances;
  if (LooksLikeGpuTable(t)) return FileKind::kGpus;
  return FileKind::kUnknown;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads the digits of `s` starting at `pos`; -1 if none.
int DigitsAt(const std::string& s, size_t pos, size_t* end) {
  size_t e = pos;
  while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
  *end = e;
  return e == pos ? -1 : std::atoi(s.substr(pos, e - pos).c_str());
}

// The GPU count an instance name states, for the naming schemes in the catalog: GCP "a3-highgpu-8g",
// Lambda "gpu_8x_h100_sxm5", GCP n1 attach "n1-*+4xT4". Other names state nothing (AWS "p5.48xlarge"
// counts vCPUs, not GPUs).
std::optional<int> CountFromName(const std::string& name) {
  size_t end = 0;
  if (name.rfind("gpu_", 0) == 0) {
    int n = DigitsAt(name, 4, &end);
    if (n > 0 && end < name.size() && name[end] == 'x') return n;
  }
  if (size_t plus = name.find('+'); plus != std::string::npos) {
    int n = DigitsAt(name, plus + 1, &end);
    if (n > 0 && end < name.size() && name[end] == 'x') return n;
  }
  if (name.size() > 2 && name.back() == 'g') {
    size_t dash = name.rfind('-');
    if (dash != std::string::npos) {
      int n = DigitsAt(name, dash + 1, &end);
      if (n > 0 && end == name.size() - 1) return n;
    }
  }
  return std::nullopt;
}

constexpr int kMaxGpusPerInstance = 1024;

Status ParseInstances(const CsvTable& t, const std::vector<GpuSpec>& gpus, const PlanDefaults& d,
                      Catalog* cat) {
  for (const char* col : kInstanceRequired) {
    if (!t.Has(col)) {
      return Status::InvalidArgument(fmt::format(
          "{}:1: missing column '{}' (an instance catalog needs provider,region,instance_type,gpu,gpu_count,"
          "price_ondemand_hr,price_spot_hr; gpu_mem_gib,vcpus,mem_gib,spot_hazard_per_hr are optional)",
          t.file, col));
    }
  }
  const int c_prov = t.Column("provider"), c_reg = t.Column("region"), c_type = t.Column("instance_type");
  const int c_gpu = t.Column("gpu"), c_count = t.Column("gpu_count"), c_gmem = t.Column("gpu_mem_gib");
  const int c_vcpu = t.Column("vcpus"), c_mem = t.Column("mem_gib"), c_od = t.Column("price_ondemand_hr");
  const int c_spot = t.Column("price_spot_hr"), c_haz = t.Column("spot_hazard_per_hr");
  for (const CsvRow& row : t.rows) {
    InstanceOffer o;
    o.where = t.Where(row);
    TERN_ASSIGN_OR_RETURN(o.provider, RequiredText(t, row, c_prov));
    TERN_ASSIGN_OR_RETURN(o.region, RequiredText(t, row, c_reg));
    TERN_ASSIGN_OR_RETURN(o.instance_type, RequiredText(t, row, c_type));
    TERN_ASSIGN_OR_RETURN(o.gpu, RequiredText(t, row, c_gpu));
    TERN_ASSIGN_OR_RETURN(std::optional<double> count, OptionalNumber(t, row, c_count));
    // The cap keeps the cast to int defined (fuzz/catalog_csv found a 54-digit count) and is far above any
    // instance sold (8 or 16 GPUs).
    if (!count || *count < 1 || *count > kMaxGpusPerInstance || *count != std::floor(*count)) {
      return Status::InvalidArgument(
          fmt::format("{}column 'gpu_count': '{}' is not a positive integer up to {}", o.where,
                      Field(row, c_count), kMaxGpusPerInstance));
    }
    o.gpu_count = static_cast<int>(*count);
    for (size_t i = 0; i < gpus.size(); ++i) {
      if (gpus[i].name == o.gpu) o.gpu_index = static_cast<int>(i);
    }
    if (o.gpu_index < 0) {
      std::string known;
      for (const auto& g : gpus) known += (known.empty() ? "" : ", ") + g.name;
      return Status::InvalidArgument(fmt::format(
          "{}unknown GPU '{}' (known: {}); add a row for it to a GPU catalog and pass it with --catalog",
          o.where, o.gpu, known));
    }
    const GpuSpec& spec = gpus[static_cast<size_t>(o.gpu_index)];
    TERN_ASSIGN_OR_RETURN(std::optional<double> gmem, OptionalNumber(t, row, c_gmem));
    o.gpu_mem_gib = gmem.value_or(spec.mem_gib);
    TERN_ASSIGN_OR_RETURN(o.vcpus, OptionalNumber(t, row, c_vcpu));
    TERN_ASSIGN_OR_RETURN(o.mem_gib, OptionalNumber(t, row, c_mem));
    TERN_ASSIGN_OR_RETURN(o.price_ondemand_hr, OptionalNumber(t, row, c_od));
    TERN_ASSIGN_OR_RETURN(o.price_spot_hr, OptionalNumber(t, row, c_spot));
    TERN_ASSIGN_OR_RETURN(o.spot_hazard_per_hr, OptionalNumber(t, row, c_haz));
    for (auto [price, col] : {std::pair{o.price_ondemand_hr, c_od}, std::pair{o.price_spot_hr, c_spot}}) {
      if (price && *price == 0) {
        return Status::InvalidArgument(fmt::format(
            "{}column '{}' is 0; leave it empty when the price is unknown", o.where, t.header[col]));
      }
    }
    // Suspicious but usable: keep the row, attach the reason.
    if (o.price_spot_hr && o.price_ondemand_hr) {
      const double ratio = *o.price_spot_hr / *o.price_ondemand_hr;
      if (ratio >= 1.0) {
        o.spot_warnings.push_back(
            fmt::format("spot ${:g}/h >= on-demand ${:g}/h", *o.price_spot_hr, *o.price_ondemand_hr));
      } else if (ratio < d.spot_min_ratio) {
        o.spot_warnings.push_back(
            fmt::format("spot is {:.0f}% of on-demand (stale or one-zone price?)", ratio * 100));
      }
    }
    if (auto named = CountFromName(o.instance_type); named && *named != o.gpu_count) {
      o.warnings.push_back(fmt::format("name says {} GPUs, gpu_count is {}", *named, o.gpu_count));
    }
    if (Lower(o.instance_type).find("pcie") != std::string::npos &&
        Lower(spec.form_factor).find("pcie") == std::string::npos) {
      o.warnings.push_back(fmt::format("PCIe instance listed with GPU '{}' ({}): peak may be overstated",
                                       o.gpu, spec.form_factor));
    }
    if (std::fabs(o.gpu_mem_gib - spec.mem_gib) > 0.1 * spec.mem_gib) {
      o.warnings.push_back(
          fmt::format("gpu_mem_gib {:g} differs from {}'s {:g} GiB", o.gpu_mem_gib, o.gpu, spec.mem_gib));
    }
    if (!o.vcpus && !o.mem_gib) o.warnings.push_back("price covers the GPUs only (no host VM in the row)");
    for (const auto& prev : cat->offers) {
      if (prev.provider == o.provider && prev.instance_type == o.instance_type &&
          (prev.gpu != o.gpu || prev.gpu_count != o.gpu_count)) {
        o.warnings.push_back(
            fmt::format("{} has {}x{} at {}", o.instance_type, prev.gpu_count, prev.gpu, prev.where));
        break;
      }
    }
    cat->offers.push_back(std::move(o));
  }
  return Status::Ok();
}

Status ParseNetwork(const CsvTable& t,
                    std::map<std::string, std::pair<std::optional<double>, std::optional<double>>>* net) {
  const int c_prov = t.Column("provider"), c_type = t.Column("instance_type");
  const int c_net = t.Column("network_gbps"), c_link = t.Column("gpu_link_gbps");
  if (c_prov < 0) return Status::InvalidArgument(fmt::format("{}:1: missing column 'provider'", t.file));
  for (const CsvRow& row : t.rows) {
    TERN_ASSIGN_OR_RETURN(std::string prov, RequiredText(t, row, c_prov));
    TERN_ASSIGN_OR_RETURN(std::string type, RequiredText(t, row, c_type));
    TERN_ASSIGN_OR_RETURN(std::optional<double> n, OptionalNumber(t, row, c_net));
    TERN_ASSIGN_OR_RETURN(std::optional<double> l, OptionalNumber(t, row, c_link));
    (*net)[prov + "/" + type] = {n, l};
  }
  return Status::Ok();
}

// Per-GPU on-demand price far from the median for that GPU (>= 3 offers) is a warning: it caught the
// GCP SKU-matching errors described in SOURCES.md.
void CheckPriceBands(const PlanDefaults& d, Catalog* cat) {
  std::map<std::string, std::vector<double>> per_gpu;
  for (const auto& o : cat->offers) {
    if (o.price_ondemand_hr) per_gpu[o.gpu].push_back(*o.price_ondemand_hr / o.gpu_count);
  }
  for (auto& o : cat->offers) {
    auto& v = per_gpu[o.gpu];
    if (v.size() < 3 || !o.price_ondemand_hr) continue;
    std::vector<double> s = v;
    std::nth_element(s.begin(), s.begin() + static_cast<long>(s.size() / 2), s.end());
    const double median = s[s.size() / 2];
    const double per = *o.price_ondemand_hr / o.gpu_count;
    if (per < d.price_band_low * median || per > d.price_band_high * median) {
      o.warnings.push_back(
          fmt::format("${:.2f}/GPU-h is {:.1f}x the {} median ${:.2f}", per, per / median, o.gpu, median));
    }
  }
  // One instance type priced very differently across regions: one side is likely a SKU error, and the
  // catalog cannot tell which, so every region of that type is flagged.
  std::map<std::string, std::pair<double, double>> range;  // provider/type -> (min, max)
  for (const auto& o : cat->offers) {
    if (!o.price_ondemand_hr) continue;
    auto [it, fresh] =
        range.try_emplace(o.provider + "/" + o.instance_type, *o.price_ondemand_hr, *o.price_ondemand_hr);
    if (!fresh) {
      it->second.first = std::min(it->second.first, *o.price_ondemand_hr);
      it->second.second = std::max(it->second.second, *o.price_ondemand_hr);
    }
  }
  for (auto& o : cat->offers) {
    if (!o.price_ondemand_hr) continue;
    const auto [lo, hi] = range[o.provider + "/" + o.instance_type];
    if (hi > d.region_spread_max * lo) {
      o.warnings.push_back(
          fmt::format("{} on-demand varies {:.1f}x across regions (${:g}-${:g}/h): SKU error?",
                      o.instance_type, hi / lo, lo, hi));
    }
  }
}

}  // namespace

const GpuSpec* Catalog::FindGpu(const std::string& name) const {
  for (const auto& g : gpus) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

Result<Catalog> LoadCatalogFromTexts(const std::vector<std::pair<std::string, std::string>>& texts,
                                     const PlanDefaults& defaults) {
  Catalog cat;
  std::vector<CsvTable> instance_tables, network_tables;
  for (const auto& [name, text] : texts) {
    TERN_ASSIGN_OR_RETURN(CsvTable t, ParseCsv(text, name));
    cat.files.push_back(name);
    switch (KindOf(t)) {
      case FileKind::kGpus: {
        TERN_ASSIGN_OR_RETURN(std::vector<GpuSpec> gpus, ParseGpuSpecs(t));
        for (auto& g : gpus) {
          auto it = std::find_if(cat.gpus.begin(), cat.gpus.end(),
                                 [&](const GpuSpec& x) { return x.name == g.name; });
          if (it != cat.gpus.end()) {
            cat.warnings.push_back(fmt::format("{}GPU '{}' overrides {}", g.where, g.name, it->where));
            *it = std::move(g);
          } else {
            cat.gpus.push_back(std::move(g));
          }
        }
        break;
      }
      case FileKind::kInstances:
        instance_tables.push_back(std::move(t));
        break;
      case FileKind::kNetwork:
        network_tables.push_back(std::move(t));
        break;
      case FileKind::kUnknown:
        return Status::InvalidArgument(fmt::format(
            "{}:1: not a catalog file: an instance catalog has provider,region,instance_type,gpu,gpu_count,"
            "price_ondemand_hr,price_spot_hr; a GPU catalog has gpu,mem_gib,bf16_fp16_tflops_dense,...",
            name));
    }
  }
  if (cat.gpus.empty()) return Status::InvalidArgument("no GPU specs loaded: the catalog needs a gpus.csv");
  for (const auto& t : instance_tables) TERN_RETURN_IF_ERROR(ParseInstances(t, cat.gpus, defaults, &cat));
  std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> net;
  for (const auto& t : network_tables) TERN_RETURN_IF_ERROR(ParseNetwork(t, &net));
  for (auto& o : cat.offers) {
    auto it = net.find(o.provider + "/" + o.instance_type);
    if (it != net.end()) std::tie(o.network_gbps, o.gpu_link_gbps) = it->second;
  }
  CheckPriceBands(defaults, &cat);
  for (const auto& o : cat.offers) {
    for (const auto& w : o.warnings) cat.warnings.push_back(fmt::format("{}{}: {}", o.where, o.Key(), w));
    for (const auto& w : o.spot_warnings)
      cat.warnings.push_back(fmt::format("{}{}: {}", o.where, o.Key(), w));
  }
  return cat;
}

Result<Catalog> LoadCatalog(const std::vector<std::string>& files, const PlanDefaults& defaults) {
  std::vector<std::pair<std::string, std::string>> texts;
  for (const auto& f : files) {
    Result<std::string> text = ReadFileToString(f);
    if (!text.ok()) return text.status().WithContext("reading catalog " + f);
    texts.emplace_back(f, std::move(text).value());
  }
  return LoadCatalogFromTexts(texts, defaults);
}

std::vector<std::string> ShippedCatalogFiles(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* name : {"gpus.csv", "gpu_instances.csv", "instance_network.csv"}) {
    std::string p = (std::filesystem::path(dir) / name).string();
    if (std::filesystem::exists(p)) out.push_back(p);
  }
  return out;
}

Result<std::string> FindCatalogDir() {
  namespace fs = std::filesystem;
  std::vector<std::string> looked;
  auto has_catalog = [&](const fs::path& dir) {
    looked.push_back(dir.string());
    std::error_code ec;
    return fs::exists(dir / "gpu_instances.csv", ec) && fs::exists(dir / "gpus.csv", ec);
  };
  if (const char* env = std::getenv("TERN_DATA_DIR"); env && *env) {
    fs::path dir = fs::path(env) / "catalog";
    if (has_catalog(dir)) return dir.string();
    return Status::NotFound(
        fmt::format("TERN_DATA_DIR={} but {} has no gpus.csv + gpu_instances.csv", env, dir.string()));
  }
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path(ec));
  for (const auto& start : starts) {
    for (fs::path p = start; !p.empty(); p = p.parent_path()) {
      if (has_catalog(p / "data" / "catalog")) return (p / "data" / "catalog").string();
      if (p == p.parent_path()) break;
    }
  }
  std::string list;
  for (const auto& l : looked) list += "\n  " + l;
  return Status::NotFound(fmt::format(
      "cannot find the shipped catalog (data/catalog/gpus.csv + gpu_instances.csv); looked in:{}\n"
      "Set TERN_DATA_DIR to the directory holding catalog/, or pass your own files with --catalog.",
      list));
}

}  // namespace tern::plan
