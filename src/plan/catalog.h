// The instance catalog: what can be rented, where, for how much, with which GPUs. Loaded from CSV files
// (the shipped data/catalog/ plus any user files); each file's kind is told by its header:
//   instances:
//   provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_hr
//              [,spot_hazard_per_hr]
//   GPU specs: gpu,...,mem_gib,... (gpus.csv)
//   network:   provider,instance_type,network_gbps[,gpu_link_gbps]
// A malformed row is an error naming file:line. A suspicious row (spot >= on-demand, a per-GPU price far
// outside its GPU's band, a GPU count the instance name contradicts, ...) is kept but carries a warning
// that every plan built on it shows, so it is never used silently.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/defaults.h"
#include "plan/gpu_specs.h"

namespace tern::plan {

struct InstanceOffer {
  std::string provider, region, instance_type, gpu;
  int gpu_count = 0;
  double gpu_mem_gib = 0;  // from the row, else from the GPU spec
  std::optional<double> vcpus, mem_gib;
  std::optional<double> price_ondemand_hr, price_spot_hr;  // per instance
  std::optional<double> spot_hazard_per_hr;                // per instance, optional column
  std::optional<double> network_gbps, gpu_link_gbps;       // joined from a network file
  int gpu_index = -1;                                      // into Catalog::gpus
  std::string where;                                       // "file:line: "
  std::vector<std::string> warnings;                       // apply to every billing
  std::vector<std::string> spot_warnings;                  // apply to the spot price only

  std::string Key() const { return provider + "/" + region + "/" + instance_type; }
};

struct Catalog {
  std::vector<GpuSpec> gpus;
  std::vector<InstanceOffer> offers;
  std::vector<std::string> warnings;  // "file:line: ..." for every suspicious row, in file order
  std::vector<std::string> files;

  const GpuSpec* FindGpu(const std::string& name) const;
  const GpuSpec& GpuOf(const InstanceOffer& o) const { return gpus[static_cast<size_t>(o.gpu_index)]; }
};

// Loads and validates the files (any order; GPU specs are read first). Later GPU specs with the same
// name replace earlier ones (a user file overrides the shipped one), with a warning.
Result<Catalog> LoadCatalog(const std::vector<std::string>& files, const PlanDefaults& defaults);
// Same from in-memory texts (name, contents): what the tests and the benchmark use.
Result<Catalog> LoadCatalogFromTexts(const std::vector<std::pair<std::string, std::string>>& texts,
                                     const PlanDefaults& defaults);

// The shipped files inside a data/catalog directory.
std::vector<std::string> ShippedCatalogFiles(const std::string& catalog_dir);

// Finds data/catalog: $TERN_DATA_DIR/catalog if TERN_DATA_DIR is set (and nothing else), otherwise
// data/catalog in the executable's directory and its parents, then the current directory and its
// parents. On failure the message lists every place it looked.
Result<std::string> FindCatalogDir();

}  // namespace tern::plan
