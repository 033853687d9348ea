#include "plan/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace tern::plan {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses the longest leading number of `s` (strtod accepts "1.3e9"); returns false if none or negative.
bool LeadingNumber(std::string_view s, double* value, std::string_view* rest) {
  std::string buf(s);
  char* end = nullptr;
  double v = std::strtod(buf.c_str(), &end);
  if (end == buf.c_str() || !std::isfinite(v) || v < 0) return false;
  *value = v;
  *rest = s.substr(static_cast<size_t>(end - buf.c_str()));
  return true;
}

}  // namespace

Result<double> ParseCount(std::string_view text, std::string_view what) {
  std::string_view s = Trim(text);
  double v = 0;
  std::string_view rest;
  if (!LeadingNumber(s, &v, &rest)) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a count; write e.g. 10B, 500M, 124k or 1.3e9", what, text));
  }
  rest = Trim(rest);
  double scale = 1;
  if (rest.size() == 1) {
    switch (std::tolower(static_cast<unsigned char>(rest[0]))) {
      case 'k':
        scale = 1e3;
        break;
      case 'm':
        scale = 1e6;
        break;
      case 'b':
      case 'g':
        scale = 1e9;
        break;
      case 't':
        scale = 1e12;
        break;
      default:
        scale = 0;
    }
  } else if (!rest.empty()) {
    scale = 0;
  }
  if (scale == 0) {
    return Status::InvalidArgument(
        fmt::format("{}: unknown suffix in '{}'; use k, M, B or T (10B = 10 billion)", what, text));
  }
  if (v * scale <= 0)
    return Status::InvalidArgument(fmt::format("{}: must be positive, got '{}'", what, text));
  return v * scale;
}

Result<double> ParseDurationHours(std::string_view text, std::string_view what) {
  std::string_view s = Trim(text);
  double v = 0;
  std::string_view rest;
  if (!LeadingNumber(s, &v, &rest)) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a duration; write e.g. 48h, 90m, 2d", what, text));
  }
  rest = Trim(rest);
  double hours_per_unit = 0;
  if (rest == "s" || rest == "sec")
    hours_per_unit = 1.0 / 3600;
  else if (rest == "m" || rest == "min")
    hours_per_unit = 1.0 / 60;
  else if (rest == "h" || rest == "hr")
    hours_per_unit = 1;
  else if (rest == "d")
    hours_per_unit = 24;
  else if (rest == "w")
    hours_per_unit = 24 * 7;
  if (hours_per_unit == 0) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' needs a unit: s, m, h, d or w (e.g. 48h, 90m)", what, text));
  }
  if (v <= 0) return Status::InvalidArgument(fmt::format("{}: must be positive, got '{}'", what, text));
  return v * hours_per_unit;
}

Result<double> ParseMoney(std::string_view text, std::string_view what) {
  std::string_view s = Trim(text);
  if (!s.empty() && s.front() == '$') s.remove_prefix(1);
  return ParseCount(s, what);
}

std::string FormatCount(double n) {
  const double a = std::fabs(n);
  if (a >= 1e12) return fmt::format("{:.3g}T", n / 1e12);
  if (a >= 1e9) return fmt::format("{:.3g}B", n / 1e9);
  if (a >= 1e6) return fmt::format("{:.3g}M", n / 1e6);
  if (a >= 1e3) return fmt::format("{:.3g}k", n / 1e3);
  return fmt::format("{:.3g}", n);
}

std::string FormatHours(double hours) {
  if (!std::isfinite(hours)) return "inf";
  if (hours < 1.0) return fmt::format("{:.0f} min", hours * 60);
  if (hours < 48.0) return fmt::format("{:.1f} h", hours);
  return fmt::format("{:.1f} d", hours / 24);
}

std::string FormatUsd(double usd) {
  if (!std::isfinite(usd)) return "inf";
  const double a = std::fabs(usd);
  if (a == 0) return "$0";
  if (a < 0.1) return fmt::format("${:.4f}", usd);
  if (a < 1000) return fmt::format("${:.2f}", usd);
  // Thousands separators: money in the thousands is read, not parsed.
  std::string digits = fmt::format("{:.0f}", a);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (usd < 0 ? "-$" : "$") + out;
}

std::string FormatBytes(double bytes) {
  if (bytes >= 1e12) return fmt::format("{:.2f} TB", bytes / 1e12);
  if (bytes >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.0f} B", bytes);
}

std::string FormatGiB(double bytes) {
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024));
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = Trim(text.substr(start, comma - start));
    if (!item.empty()) out.emplace_back(item);
    start = comma + 1;
  }
  return out;
}

}  // namespace tern::plan
