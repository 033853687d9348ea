// Reading the Prometheus text exposition format (version 0.0.4) that `tern serve` writes at /metrics, for
// `tern diagnose --serve`: samples `name{label="value",...} value [timestamp]`, comments and blank lines
// skipped but for `# TYPE`, which gives each sample its family's type. Label values take the format's escapes
// (\\, \", \n); values are floats, +Inf, -Inf or NaN.
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
  // The `# TYPE` of its family (counter, gauge, histogram, summary, untyped; a histogram's X_bucket, X_sum
  // and X_count are its family X's); empty when the text gave none.
  std::string type;
};

// Every sample of the text; InvalidArgument naming the line of the first malformed one.
Result<std::vector<PromSample>> ParsePromText(std::string_view text);

// True for a sample that only grows while its server runs: a counter, a histogram's buckets, sum and count, a
// summary's sum and count; without a `# TYPE`, a name ending in _total, _bucket, _sum or _count.
bool IsCumulative(const PromSample& s);

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

// What happened between two scrapes of one server (`tern diagnose --serve --since/--window`): every
// cumulative sample of `now` less the same sample (name and labels) in `before` (absent there: created since,
// kept whole); gauges as `now` has them. InvalidArgument naming the counter when one fell (the server
// restarted between the scrapes).
Result<PromMetrics> PromDelta(const PromMetrics& now, const PromMetrics& before);

// The window `tern diagnose --serve --since/--window` diagnoses: PromDelta, unless the server restarted
// between the scrapes (its process_start_time_seconds changed, or a counter fell), when it is the newer
// scrape whole, the life since the restart (as Prometheus's increase() counts a reset counter from zero; the
// time before the restart is in neither scrape). `restart` then says what showed it.
struct PromWindow {
  PromMetrics metrics;
  std::string restart;  // empty: no restart, metrics is the delta
};
PromWindow PromSince(const PromMetrics& now, const PromMetrics& before);

}  // namespace tern::report
