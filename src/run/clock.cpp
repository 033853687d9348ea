#include "run/clock.h"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

namespace tern::run {

std::string FormatUtc(double unix_s) {
  if (unix_s <= 0) return "";
  const long long total_ms = std::llround(unix_s * 1000);
  const std::time_t t = static_cast<std::time_t>(total_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  const int ms = static_cast<int>(total_ms % 1000);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

double ParseUtc(const std::string& text) {
  std::tm tm{};
  int ms = 0, n = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
    return 0;
  std::string rest = text.substr(static_cast<size_t>(n));
  if (!rest.empty() && rest[0] == '.') {
    size_t digits = 1;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) digits++;
    std::string frac = (rest.substr(1, digits - 1) + "000").substr(0, 3);
    ms = std::atoi(frac.c_str());
    rest = rest.substr(digits);
  }
  if (rest != "Z" && rest != "") return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + ms / 1000.0;
}

}  // namespace tern::run
