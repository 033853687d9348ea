// `--instance aws:us-east-1:p5.48xlarge:spot`: the price per hour from the shipped catalog
// (data/catalog/, plan/catalog.h), so that nobody types a price. Reserved is on-demand less the planner's
// reserved discount (plan/defaults.h).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "plan/catalog.h"

namespace tern::run {

struct InstancePrice {
  std::string instance;  // normalised: provider:region:type:billing
  std::string billing;   // on-demand | spot | reserved
  double price_per_hour = 0;
  std::string gpu;
  int gpu_count = 0;
  std::vector<std::string> warnings;  // the catalog's doubts about this row
};

// `spec` is provider:region:type[:billing] (billing defaults to on-demand). Unknown names are errors that
// list what the catalog has nearby (the types of that region, the regions of that type).
[[nodiscard]] Result<InstancePrice> PriceInstance(const std::string& spec, const plan::Catalog& catalog);
// The same against the shipped catalog (FindCatalogDir).
[[nodiscard]] Result<InstancePrice> PriceInstanceFromShippedCatalog(const std::string& spec);

}  // namespace tern::run
