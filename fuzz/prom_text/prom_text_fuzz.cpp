// tern serve's /metrics text as `tern diagnose --serve` reads it (ParsePromText, src/report/prom_text.h).
// What it promises, checked on every input it accepts: each sample has a valid name, writing the samples out
// again in the format (label values escaped) reads back the same samples, and the window between a scrape and
// itself (PromDelta) keeps every sample with the cumulative ones at 0.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "report/prom_text.h"

namespace {

std::string Render(const std::vector<tern::report::PromSample>& samples) {
  std::string out;
  for (const auto& s : samples) {
    out += s.name;
    if (!s.labels.empty()) {
      out += '{';
      for (const auto& [k, v] : s.labels) {
        out += k + "=\"";
        for (char c : v)
          out += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
        out += "\",";
      }
      out += '}';
    }
    char value[64];
    if (std::isnan(s.value))
      std::snprintf(value, sizeof value, "NaN");
    else if (std::isinf(s.value))
      std::snprintf(value, sizeof value, "%s", s.value > 0 ? "+Inf" : "-Inf");
    else
      std::snprintf(value, sizeof value, "%.17g", s.value);
    out += std::string(" ") + value + "\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto samples = tern::report::ParsePromText(text);
  if (!samples.ok()) return 0;
  for (const auto& s : *samples)
    if (s.name.empty() || (s.name[0] >= '0' && s.name[0] <= '9')) __builtin_trap();
  auto again = tern::report::ParsePromText(Render(*samples));
  if (!again.ok() || again->size() != samples->size()) __builtin_trap();
  for (size_t i = 0; i < samples->size(); i++) {
    const auto &a = (*samples)[i], &b = (*again)[i];
    const bool same_value = a.value == b.value || (std::isnan(a.value) && std::isnan(b.value));
    if (a.name != b.name || a.labels != b.labels || !same_value) __builtin_trap();
  }
  // A window between the scrape and itself (tern diagnose --since): an error (a duplicate sample may "fall")
  // or every sample kept, a cumulative one of a finite value at 0.
  const tern::report::PromMetrics m(*samples);
  auto delta = tern::report::PromDelta(m, m);
  if (delta.ok()) {
    if (delta->samples().size() != samples->size()) __builtin_trap();
    bool unique = samples->size() <= 256;  // (the check below is quadratic)
    for (size_t i = 0; i < samples->size() && unique; i++)
      for (size_t j = 0; j < i && unique; j++)
        unique = (*samples)[i].name != (*samples)[j].name || (*samples)[i].labels != (*samples)[j].labels;
    for (const auto& s : delta->samples())
      if (unique && tern::report::IsCumulative(s) && std::isfinite(s.value) && s.value != 0) __builtin_trap();
  }
  return 0;
}
