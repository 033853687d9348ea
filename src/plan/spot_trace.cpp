#include "plan/spot_trace.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tern::plan {

namespace fs = std::filesystem;

std::string_view PolarityName(Polarity p) {
  return p == Polarity::kAvailableIfNonzero ? "available-if-nonzero" : "unavailable-if-nonzero";
}

Result<Polarity> ParsePolarity(std::string_view text) {
  if (text == "available-if-nonzero") return Polarity::kAvailableIfNonzero;
  if (text == "unavailable-if-nonzero") return Polarity::kUnavailableIfNonzero;
  return Status::InvalidArgument(
      fmt::format("--polarity {}: expected available-if-nonzero (the trace repository's README) or "
                  "unavailable-if-nonzero "
                  "(the paper authors' simulator); see data/spot-traces/README.md",
                  text));
}

double SpotTrace::AvailableFraction() const {
  if (up.empty()) return 0;
  return static_cast<double>(std::count(up.begin(), up.end(), uint8_t{1})) / static_cast<double>(up.size());
}

std::string SpotTrace::Region() const {
  const size_t n = zone.size();
  if (n >= 2 && std::isalpha(static_cast<unsigned char>(zone[n - 1])) &&
      std::isdigit(static_cast<unsigned char>(zone[n - 2])))
    return zone.substr(0, n - 1);
  return zone;
}

namespace {

std::string ZoneOf(const std::string& file) {
  std::string stem = fs::path(file).stem().string();
  const size_t us = stem.find('_');
  return us == std::string::npos ? stem : stem.substr(0, us);
}

std::string FamilyOf(const std::string& file) {
  for (const auto& part : fs::path(file)) {
    if (part == "preemption") return "preemption";
    if (part == "availability") return "availability";
  }
  return "";
}

}  // namespace

Result<SpotTrace> ParseSpotTrace(std::string_view text, const std::string& file, Polarity polarity) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::InvalidArgument(
        fmt::format("{}: not a spot trace (expected a JSON object {{\"metadata\": {{\"gap_seconds\": G}}, "
                    "\"data\": [...]}})",
                    file));
  SpotTrace t;
  t.file = file;
  t.zone = ZoneOf(file);
  t.family = FamilyOf(file);
  t.polarity = t.family == "preemption" ? Polarity::kAvailableIfNonzero : polarity;
  const auto meta = j.find("metadata");
  if (meta == j.end() || !meta->is_object() || !meta->contains("gap_seconds") ||
      !(*meta)["gap_seconds"].is_number())
    return Status::InvalidArgument(fmt::format("{}: metadata.gap_seconds is missing or not a number", file));
  t.gap_s = (*meta)["gap_seconds"].get<double>();
  if (!(t.gap_s > 0) || t.gap_s > 86400)
    return Status::InvalidArgument(
        fmt::format("{}: metadata.gap_seconds {} is not a tick length (0 < gap <= 86400)", file, t.gap_s));
  const auto data = j.find("data");
  if (data == j.end() || !data->is_array() || data->empty())
    return Status::InvalidArgument(fmt::format("{}: \"data\" is missing or empty", file));
  t.up.reserve(data->size());
  const bool nonzero_up = t.polarity == Polarity::kAvailableIfNonzero;
  for (size_t i = 0; i < data->size(); i++) {
    const auto& v = (*data)[i];
    if (!v.is_number_integer() && !v.is_number_unsigned())
      return Status::InvalidArgument(fmt::format("{}: data[{}] is {}, not an integer", file, i, v.dump()));
    const bool nonzero = v.get<int64_t>() != 0;
    t.up.push_back(nonzero == nonzero_up ? 1 : 0);
  }
  return t;
}

Result<std::vector<SpotTrace>> LoadSpotTraces(const std::vector<std::string>& paths, Polarity polarity) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".json") found.push_back(e.path().string());
      if (found.empty())
        return Status::NotFound(fmt::format("--trace {}: no *.json trace files under this directory", p));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      return Status::NotFound(fmt::format("--trace {}: no such file or directory", p));
    }
  }
  std::vector<SpotTrace> out;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in) return Status::IoError(fmt::format("{}: cannot read", f));
    TERN_ASSIGN_OR_RETURN(SpotTrace t, ParseSpotTrace(ss.str(), f, polarity));
    out.push_back(std::move(t));
  }
  return out;
}

HazardEstimate EstimateHazard(const SpotTrace& t) {
  HazardEstimate h;
  size_t up = 0, outages = 0, down_ticks = 0, run = 0, longest = 0;
  for (size_t i = 0; i < t.up.size(); i++) {
    if (t.up[i]) {
      up++;
      if (run > 0) {
        outages++;
        down_ticks += run;
        longest = std::max(longest, run);
        run = 0;
      }
      if (i + 1 < t.up.size() && !t.up[i + 1]) h.preemptions++;
    } else {
      run++;
    }
  }
  if (run > 0) {  // the trace ends inside an outage
    outages++;
    down_ticks += run;
    longest = std::max(longest, run);
  }
  h.up_hours = up * t.gap_h();
  h.mtbf_h = h.preemptions > 0 ? h.up_hours / h.preemptions : t.hours();
  h.hazard_per_hr = h.mtbf_h > 0 ? 1.0 / h.mtbf_h : 0;
  h.mean_outage_h = outages > 0 ? down_ticks * t.gap_h() / outages : 0;
  h.longest_outage_h = longest * t.gap_h();
  return h;
}

}  // namespace tern::plan
