// Reading the Prometheus text exposition format (version 0.0.4) that `tern serve` writes at /metrics, for
// `tern diagnose --serve`: samples `name{label="value",...} value [timestamp]`, comments and blank lines
// skipped. Label values take the format's escapes (\\, \", \n); values are floats, +Inf, -Inf or NaN.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::report {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Every sample of the text; InvalidArgument naming the line of the first malformed one.
Result<std::vector<PromSample>> ParsePromText(std::string_view text);

// Lookups over a scrape.
class PromMetrics {
 public:
  PromMetrics() = default;
  explicit PromMetrics(std::vector<PromSample> samples) : samples_(std::move(samples)) {}
  // The sum of the samples called `name` whose labels include every pair of `match` (0 when none).
  double Sum(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
  bool Has(const std::string& name) const;
  // The labels of the first sample called `name`.
  std::optional<std::map<std::string, std::string>> Labels(const std::string& name) const;
  const std::vector<PromSample>& samples() const { return samples_; }

 private:
  std::vector<PromSample> samples_;
};

}  // namespace tern::report
