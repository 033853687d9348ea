#include "run/instance_price.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/ranges.h>

#include "plan/planner.h"

namespace tern::run {

Result<InstancePrice> PriceInstance(const std::string& spec, const plan::Catalog& catalog) {
  std::vector<std::string> parts;
  std::istringstream in(spec);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  if (parts.size() < 3 || parts.size() > 4) {
    return Status::InvalidArgument(fmt::format(
        "--instance '{}': write provider:region:type[:billing], e.g. aws:us-east-1:p5.48xlarge:spot "
        "(`tern plan` lists what the catalog has)",
        spec));
  }
  const std::string billing_text = parts.size() == 4 ? parts[3] : "on-demand";
  TERN_ASSIGN_OR_RETURN(plan::Billing billing, plan::ParseBilling(billing_text));
  const plan::InstanceOffer* offer = nullptr;
  std::set<std::string> types_here, regions_of_type;
  for (const auto& o : catalog.offers) {
    if (o.provider != parts[0]) continue;
    if (o.region == parts[1]) types_here.insert(o.instance_type);
    if (o.instance_type == parts[2]) regions_of_type.insert(o.region);
    if (o.region == parts[1] && o.instance_type == parts[2]) offer = &o;
  }
  if (!offer) {
    std::string hint;
    if (!regions_of_type.empty())
      hint = fmt::format("{} is listed in: {}", parts[2], fmt::join(regions_of_type, ", "));
    else if (!types_here.empty())
      hint = fmt::format("{}:{} has: {}", parts[0], parts[1], fmt::join(types_here, ", "));
    else
      hint = "the catalog has no such provider and region";
    return Status::NotFound(
        fmt::format("--instance '{}' is not in the catalog ({}); {}. Or give --price-per-hour instead", spec,
                    fmt::join(catalog.files, ", "), hint));
  }
  InstancePrice p;
  p.billing = plan::BillingName(billing);
  p.instance = fmt::format("{}:{}:{}:{}", parts[0], parts[1], parts[2], p.billing);
  p.gpu = offer->gpu;
  p.gpu_count = offer->gpu_count;
  p.warnings = offer->warnings;
  const plan::PlanDefaults defaults;
  switch (billing) {
    case plan::Billing::kSpot:
      if (!offer->price_spot_hr) {
        return Status::NotFound(
            fmt::format("{}{} has no spot price in the catalog; use :on-demand or give "
                        "--price-per-hour",
                        offer->where, offer->Key()));
      }
      p.price_per_hour = *offer->price_spot_hr;
      p.warnings.insert(p.warnings.end(), offer->spot_warnings.begin(), offer->spot_warnings.end());
      break;
    case plan::Billing::kOnDemand:
    case plan::Billing::kReserved:
      if (!offer->price_ondemand_hr) {
        return Status::NotFound(fmt::format(
            "{}{} has no on-demand price in the catalog; give --price-per-hour", offer->where, offer->Key()));
      }
      p.price_per_hour = *offer->price_ondemand_hr;
      if (billing == plan::Billing::kReserved) p.price_per_hour *= 1 - defaults.reserved_discount;
      break;
  }
  return p;
}

Result<InstancePrice> PriceInstanceFromShippedCatalog(const std::string& spec) {
  TERN_ASSIGN_OR_RETURN(std::string dir, plan::FindCatalogDir());
  TERN_ASSIGN_OR_RETURN(plan::Catalog catalog, plan::LoadCatalog(plan::ShippedCatalogFiles(dir), {}));
  return PriceInstance(spec, catalog);
}

}  // namespace tern::run
