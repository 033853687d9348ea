// Reading the measurement files tern writes (`tern bench --json`, `tern bench --serve --json`): a key's
// value with an error that names the file and the key when it is missing or of the wrong type.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern::plan {

inline Status Need(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null())
    return Status::InvalidArgument(fmt::format("{}: missing key '{}'", file, key));
  return Status::Ok();
}

template <typename T>
Status Read(const nlohmann::json& j, const char* key, const std::string& file, T* out) {
  TERN_RETURN_IF_ERROR(Need(j, key, file));
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // A count too large for T (or a fraction) is an error, not a conversion with undefined behaviour
    // (nlohmann reads 59223372036854775807 as a double; found by fuzz/bench_json).
    const nlohmann::json& v = j[key];
    const double lo = static_cast<double>(std::numeric_limits<T>::min());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    const bool fits = v.is_number_unsigned()  ? v.get<uint64_t>() <= std::numeric_limits<T>::max()
                      : v.is_number_integer() ? v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                                                    v.get<int64_t>() <= std::numeric_limits<T>::max()
                      : v.is_number_float() ? v.get<double>() >= lo && v.get<double>() <= hi &&
                                                  v.get<double>() == std::floor(v.get<double>())
                                            : true;  // not a number: the type error below
    if (!fits)
      return Status::InvalidArgument(fmt::format("{}: key '{}' is {}, not a whole number in [{}, {}]", file,
                                                 key, v.dump(), std::numeric_limits<T>::min(),
                                                 std::numeric_limits<T>::max()));
  }
  try {
    *out = j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    return Status::InvalidArgument(
        fmt::format("{}: key '{}' has the wrong type ({})", file, key, j[key].dump()));
  }
  return Status::Ok();
}

// An optional number: absent or null -> `fallback`; present with the wrong type -> an error.
inline Status ReadOptional(const nlohmann::json& j, const char* key, const std::string& file, double fallback,
                           double* out) {
  if (!j.contains(key) || j[key].is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  return Read(j, key, file, out);
}

}  // namespace tern::plan
