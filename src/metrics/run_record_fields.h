// The typed reader's inside, shared by run_record.cpp (nlohmann's objects) and run_record_file.cpp
// (simdjson's fast path for the step and evaluation rows of a long metrics.jsonl): one list of fields a
// record has, read from either kind of object with the same rules. Not for use outside src/metrics.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "metrics/run_record.h"

namespace tern::run_record_internal {

using json = nlohmann::json;

// A flat JSON object read by simdjson (a step or evaluation row of a long run), in the shape the typed
// reader below takes: its fields in file order, the last of a repeated key winning, as nlohmann's does.
struct FlatValue {
  enum class Type { kNull, kInt, kUint, kDouble, kBool, kString, kOther } type = Type::kOther;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  std::string_view s;
};

class FlatObject {
 public:
  void Clear() { fields_.clear(); }
  void Add(std::string_view key, const FlatValue& v) { fields_.emplace_back(key, v); }
  const FlatValue* Find(std::string_view key) const {
    for (auto it = fields_.rbegin(); it != fields_.rend(); ++it)
      if (it->first == key) return &it->second;
    return nullptr;
  }

 private:
  std::vector<std::pair<std::string_view, FlatValue>> fields_;
};

// The questions the typed reader asks of a value, for nlohmann's values and for FlatValue; a FlatValue's
// answers are nlohmann's for the same text (a non-negative integer is "unsigned" there).
inline const json* Find(const json& j, const char* key) {
  const auto it = j.find(key);  // one lookup a field: the rows of a long run are read by the million
  return it == j.end() ? nullptr : &*it;
}
inline bool IsNull(const json& v) {
  return v.is_null();
}
inline bool IsNumber(const json& v) {
  return v.is_number();
}
inline bool IsInteger(const json& v) {
  return v.is_number_integer();
}
inline bool IsUnsigned(const json& v) {
  return v.is_number_unsigned();
}
inline bool IsBool(const json& v) {
  return v.is_boolean();
}
inline bool IsString(const json& v) {
  return v.is_string();
}
inline double AsDouble(const json& v) {
  return v.get<double>();
}
template <typename I>
I AsInteger(const json& v) {
  return v.get<I>();
}
inline bool AsBool(const json& v) {
  return v.get<bool>();
}
inline std::string AsString(const json& v) {
  return v.get_ref<const std::string&>();
}
inline std::string Describe(const json& v) {
  return fmt::format("{} ({})", v.type_name(), v.dump());
}

using FT = FlatValue::Type;
inline const FlatValue* Find(const FlatObject& o, const char* key) {
  return o.Find(key);
}
inline bool IsNull(const FlatValue& v) {
  return v.type == FT::kNull;
}
inline bool IsInteger(const FlatValue& v) {
  return v.type == FT::kInt || v.type == FT::kUint;
}
inline bool IsNumber(const FlatValue& v) {
  return IsInteger(v) || v.type == FT::kDouble;
}
inline bool IsUnsigned(const FlatValue& v) {
  return v.type == FT::kUint || (v.type == FT::kInt && v.i >= 0);
}
inline bool IsBool(const FlatValue& v) {
  return v.type == FT::kBool;
}
inline bool IsString(const FlatValue& v) {
  return v.type == FT::kString;
}
inline double AsDouble(const FlatValue& v) {
  return v.type == FT::kInt ? static_cast<double>(v.i) : v.type == FT::kUint ? static_cast<double>(v.u) : v.d;
}
template <typename I>
I AsInteger(const FlatValue& v) {
  return v.type == FT::kInt ? static_cast<I>(v.i) : static_cast<I>(v.u);
}
inline bool AsBool(const FlatValue& v) {
  return v.b;
}
inline std::string AsString(const FlatValue& v) {
  return std::string(v.s);
}
inline std::string Describe(const FlatValue&) {
  return "a value of another type";
}  // the fast path's, unshown

// The message of a field of the wrong type (the typed reader's and ParseRunRow's).
template <typename V>
std::string TypeError(std::string_view where, const char* key, const char* want, const V& got) {
  return fmt::format("{}: \"{}\" is {}, expected {}; the file is not one tern wrote, or is damaged", where,
                     key, Describe(got), want);
}

// Reads a record's fields by type, from a nlohmann object or a FlatObject. The first error sticks; a missing
// optional field leaves its default.
template <typename Object>
class Fields {
 public:
  Fields(const Object& j, std::string_view where) : j_(j), where_(where) {}
  const Status& status() const { return status_; }

  template <typename T>
  void Need(const char* key, T* out) {
    if (!status_.ok()) return;
    const auto* v = Find(j_, key);
    if (!v) {
      status_ = Status::InvalidArgument(fmt::format("{}: \"{}\" is missing", where_, key));
      return;
    }
    Get(key, *v, out);
  }
  template <typename T>
  void Maybe(const char* key, T* out) {
    if (!status_.ok()) return;
    if (const auto* v = Find(j_, key)) Get(key, *v, out);
  }
  template <typename T>
  void Maybe(const char* key, std::optional<T>* out) {
    if (!status_.ok()) return;
    const auto* v = Find(j_, key);
    if (!v) return;
    T x{};
    Get(key, *v, &x);
    *out = std::move(x);
  }

 private:
  template <typename V>
  void Fail(const char* key, const char* want, const V& got) {
    status_ = Status::InvalidArgument(TypeError(where_, key, want, got));
  }
  template <typename V>
  void Get(const char* key, const V& v, double* out) {
    if (IsNull(v)) {
      *out = std::numeric_limits<double>::quiet_NaN();  // JSON's stand-in for inf and NaN
    } else if (IsNumber(v)) {
      *out = AsDouble(v);
    } else {
      Fail(key, "a number", v);
    }
  }
  template <typename V, typename I>
  void GetInteger(const char* key, const V& v, I* out) {
    if (!IsInteger(v)) return Fail(key, "an integer", v);
    if (std::is_unsigned_v<I> && !IsUnsigned(v) && AsInteger<int64_t>(v) < 0)
      return Fail(key, "a non-negative integer", v);
    *out = AsInteger<I>(v);
  }
  template <typename V>
  void Get(const char* key, const V& v, int* out) {
    GetInteger(key, v, out);
  }
  template <typename V>
  void Get(const char* key, const V& v, int64_t* out) {
    GetInteger(key, v, out);
  }
  template <typename V>
  void Get(const char* key, const V& v, uint64_t* out) {
    GetInteger(key, v, out);
  }
  template <typename V>
  void Get(const char* key, const V& v, bool* out) {
    if (!IsBool(v)) return Fail(key, "true or false", v);
    *out = AsBool(v);
  }
  template <typename V>
  void Get(const char* key, const V& v, std::string* out) {
    if (!IsString(v)) return Fail(key, "a string", v);
    *out = AsString(v);
  }
  void Get(const char* key, const json& v, std::vector<std::string>* out) {
    bool ok = v.is_array();
    for (size_t i = 0; ok && i < v.size(); i++) ok = v[i].is_string();
    if (!ok) return Fail(key, "an array of strings", v);
    *out = v.get<std::vector<std::string>>();
  }

  const Object& j_;
  std::string_view where_;
  Status status_;
};

template <typename Object>
Result<StepRecord> ReadStep(const Object& j, std::string_view where) {
  StepRecord r;
  Fields<Object> f(j, where);
  f.Need("step", &r.step);
  f.Need("loss", &r.loss);
  f.Maybe("lr", &r.lr);
  f.Maybe("grad_norm", &r.grad_norm);
  f.Maybe("tokens", &r.tokens);
  f.Maybe("tokens_per_s", &r.tokens_per_s);
  f.Maybe("mfu", &r.mfu);
  f.Maybe("step_ms", &r.step_ms);
  f.Maybe("data_wait_ms", &r.data_wait_ms);
  f.Maybe("comm_ms", &r.comm_ms);
  f.Maybe("precision", &r.precision);
  f.Maybe("elapsed_s", &r.elapsed_s);
  if (Find(j, "step_ms_max")) {
    RankSpreadRecord s;
    f.Need("step_ms_max", &s.step_ms_max);
    f.Need("step_ms_min", &s.step_ms_min);
    f.Need("data_wait_ms_max", &s.data_wait_ms_max);
    f.Need("data_wait_ms_min", &s.data_wait_ms_min);
    r.ranks = s;
  }
  f.Maybe("loss_scale", &r.loss_scale);
  f.Maybe("skipped", &r.skipped);
  if (Find(j, "gpu_util")) {
    GpuRecord g;
    f.Need("gpu_util", &g.util_pct);
    f.Need("gpu_mem_gb", &g.mem_used_gb);
    f.Need("gpu_power_w", &g.power_w);
    f.Need("joules_per_token", &g.joules_per_token);
    r.gpu = g;
  }
  f.Maybe("cost_usd", &r.cost_usd);
  f.Maybe("usd_per_mtok", &r.usd_per_mtok);
  if (!f.status().ok()) return f.status();
  return r;
}

// "val_loss_mix": {"dir": loss, ...} of an evaluation row or summary; absent = none.
inline Result<std::vector<std::pair<std::string, double>>> ReadMix(const json& j, std::string_view where) {
  std::vector<std::pair<std::string, double>> out;
  const json* m = Find(j, "val_loss_mix");
  if (!m || m->is_null()) return out;
  if (!m->is_object())
    return Status::InvalidArgument(fmt::format("{}: val_loss_mix is not an object of losses", where));
  for (const auto& [dir, loss] : m->items()) {
    if (!loss.is_number())
      return Status::InvalidArgument(fmt::format("{}: val_loss_mix[{}] is not a number", where, dir));
    out.emplace_back(dir, loss.get<double>());
  }
  return out;
}
inline json MixJson(const std::vector<std::pair<std::string, double>>& losses) {
  json m = json::object();
  for (const auto& [dir, loss] : losses) m[dir] = loss;
  return m;
}

template <typename Object>
Result<EvalRecord> ReadEval(const Object& j, std::string_view where) {
  EvalRecord r;
  Fields<Object> f(j, where);
  f.Need("step", &r.step);
  f.Need("val_loss", &r.val_loss);
  f.Maybe("eval_ms", &r.eval_ms);
  f.Maybe("choice_acc", &r.choice_acc);
  f.Maybe("choice_acc_norm", &r.choice_acc_norm);
  if (!f.status().ok()) return f.status();
  // A flat object has no nested field: rows with val_loss_mix are read by nlohmann (ReadFlatRow declines).
  if constexpr (std::is_same_v<Object, json>) {
    TERN_ASSIGN_OR_RETURN(r.val_loss_mix, ReadMix(j, where));
  }
  return r;
}

}  // namespace tern::run_record_internal
