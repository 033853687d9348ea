#include "metrics/run_record.h"

#include "metrics/run_record_fields.h"

#include <fstream>

namespace tern {
namespace {

using json = nlohmann::json;
using run_record_internal::Fields;
using run_record_internal::MixJson;
using run_record_internal::ReadEval;
using run_record_internal::ReadMix;
using run_record_internal::ReadStep;
using run_record_internal::TypeError;

Result<StartRecord> ReadStart(const json& j, std::string_view where) {
  StartRecord r;
  Fields<json> f(j, where);
  f.Maybe("model", &r.model);
  f.Maybe("params", &r.params);
  f.Maybe("device", &r.device);
  f.Maybe("threads", &r.threads);
  f.Maybe("precision", &r.precision);
  f.Maybe("batch_size", &r.batch_size);
  f.Maybe("seq_len", &r.seq_len);
  f.Maybe("grad_accum_steps", &r.grad_accum_steps);
  f.Maybe("recompute", &r.recompute);
  f.Maybe("flops_per_token", &r.flops_per_token);
  f.Maybe("peak_gflops", &r.peak_gflops);
  f.Maybe("memory_bytes", &r.memory_bytes);
  f.Maybe("tokenizer", &r.tokenizer);
  f.Maybe("price_per_hour", &r.price_per_hour);
  f.Maybe("world", &r.world);
  f.Maybe("dist", &r.dist);
  f.Maybe("zero", &r.zero);
  f.Maybe("gpu_metrics", &r.gpu_metrics);
  f.Maybe("init_from", &r.init_from);
  f.Maybe("data_fetch_s", &r.data_fetch_s);
  f.Maybe("data_fetch_bytes", &r.data_fetch_bytes);
  f.Maybe("loss_scale", &r.loss_scale);
  if (!f.status().ok()) return f.status();
  return r;
}

Result<EndRecord> ReadEnd(const json& j, std::string_view where) {
  EndRecord r;
  Fields<json> f(j, where);
  f.Maybe("steps", &r.steps);
  f.Maybe("train_loss", &r.train_loss);
  f.Maybe("val_loss", &r.val_loss);
  f.Maybe("tokens", &r.tokens);
  f.Maybe("wall_s", &r.wall_s);
  f.Maybe("train_s", &r.train_s);
  f.Maybe("tokens_per_s", &r.tokens_per_s);
  f.Maybe("mfu", &r.mfu);
  f.Maybe("peak_gflops", &r.peak_gflops);
  f.Maybe("cost_usd", &r.cost_usd);
  f.Maybe("samples", &r.samples);
  f.Maybe("loss_scale", &r.loss_scale);
  f.Maybe("skipped_steps", &r.skipped_steps);
  f.Maybe("choice_acc", &r.choice_acc);
  f.Maybe("choice_acc_norm", &r.choice_acc_norm);
  if (!f.status().ok()) return f.status();
  TERN_ASSIGN_OR_RETURN(r.val_loss_mix, ReadMix(j, where));
  if (j.contains("job")) r.job = j["job"];
  return r;
}

}  // namespace

Result<int> CheckRecordVersion(const json& record, std::string_view where) {
  if (!record.is_object()) return Status::InvalidArgument(fmt::format("{}: not a JSON object", where));
  if (!record.contains(kRunRecordVersionKey)) return 0;  // written before records carried a version
  const json& v = record[kRunRecordVersionKey];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return Status::InvalidArgument(
        fmt::format("{}: format version \"v\": {} is not a version number tern writes", where, v.dump()));
  }
  const int64_t version = v.get<int64_t>();
  if (version > kRunRecordVersion) {
    return Status::InvalidArgument(fmt::format(
        "{}: format version {} is newer than this tern reads (up to {}): read it with the tern that wrote "
        "it, or upgrade tern",
        where, version, kRunRecordVersion));
  }
  return static_cast<int>(version);
}

void StampRecordVersion(json* record) {
  (*record)[kRunRecordVersionKey] = kRunRecordVersion;
}

double EventRecord::Number(const char* key, double otherwise) const {
  return fields.contains(key) && fields[key].is_number() ? fields[key].get<double>() : otherwise;
}

json ToJson(const StartRecord& r) {
  json j = {{"event", "start"},
            {"model", r.model},
            {"params", r.params},
            {"device", r.device},
            {"threads", r.threads},
            {"precision", r.precision},
            {"batch_size", r.batch_size},
            {"seq_len", r.seq_len},
            {"grad_accum_steps", r.grad_accum_steps},
            {"recompute", r.recompute},
            {"flops_per_token", r.flops_per_token},
            {"peak_gflops", r.peak_gflops},
            {"memory_bytes", r.memory_bytes},
            {"tokenizer", r.tokenizer},
            {"price_per_hour", r.price_per_hour},
            {"world", r.world},
            {"dist", r.dist},
            {"zero", r.zero}};
  if (r.gpu_metrics) j["gpu_metrics"] = *r.gpu_metrics;
  if (r.init_from) j["init_from"] = *r.init_from;
  if (r.data_fetch_s) j["data_fetch_s"] = *r.data_fetch_s;
  if (r.data_fetch_bytes) j["data_fetch_bytes"] = *r.data_fetch_bytes;
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  StampRecordVersion(&j);
  return j;
}

json ToJson(const StepRecord& r) {
  json j = {{"step", r.step},
            {"loss", r.loss},
            {"lr", r.lr},
            {"grad_norm", r.grad_norm},  // inf is dumped as null
            {"tokens", r.tokens},
            {"tokens_per_s", r.tokens_per_s},
            {"mfu", r.mfu},
            {"step_ms", r.step_ms},
            {"data_wait_ms", r.data_wait_ms},
            {"comm_ms", r.comm_ms},
            {"precision", r.precision}};
  if (r.elapsed_s) j["elapsed_s"] = *r.elapsed_s;
  if (r.ranks) {  // a straggler shows as a gap between the slowest and the fastest rank
    j["step_ms_max"] = r.ranks->step_ms_max;
    j["step_ms_min"] = r.ranks->step_ms_min;
    j["data_wait_ms_max"] = r.ranks->data_wait_ms_max;
    j["data_wait_ms_min"] = r.ranks->data_wait_ms_min;
  }
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  if (r.skipped) j["skipped"] = true;
  if (r.gpu) {  // absent (not null) on CPU runs and where NVML is missing
    j["gpu_util"] = r.gpu->util_pct;
    j["gpu_mem_gb"] = r.gpu->mem_used_gb;
    j["gpu_power_w"] = r.gpu->power_w;
    j["joules_per_token"] = r.gpu->joules_per_token;
  }
  if (r.cost_usd) j["cost_usd"] = *r.cost_usd;
  if (r.usd_per_mtok) j["usd_per_mtok"] = *r.usd_per_mtok;
  StampRecordVersion(&j);
  return j;
}

json ToJson(const EvalRecord& r) {
  json j = {{"step", r.step}, {"val_loss", r.val_loss}, {"eval_ms", r.eval_ms}};
  if (r.choice_acc) j["choice_acc"] = *r.choice_acc;
  if (r.choice_acc_norm) j["choice_acc_norm"] = *r.choice_acc_norm;
  if (!r.val_loss_mix.empty()) j["val_loss_mix"] = MixJson(r.val_loss_mix);
  StampRecordVersion(&j);
  return j;
}

json ToJson(const EndRecord& r) {
  json j = {{"event", "end"},
            {"steps", r.steps},
            {"train_loss", r.train_loss},
            {"val_loss", r.val_loss},
            {"tokens", r.tokens},
            {"wall_s", r.wall_s},
            {"train_s", r.train_s},
            {"tokens_per_s", r.tokens_per_s},
            {"mfu", r.mfu},
            {"peak_gflops", r.peak_gflops},
            {"cost_usd", r.cost_usd},
            {"samples", r.samples}};
  if (r.loss_scale) j["loss_scale"] = *r.loss_scale;
  if (r.skipped_steps) j["skipped_steps"] = *r.skipped_steps;
  if (r.choice_acc) j["choice_acc"] = *r.choice_acc;
  if (r.choice_acc_norm) j["choice_acc_norm"] = *r.choice_acc_norm;
  if (!r.val_loss_mix.empty()) j["val_loss_mix"] = MixJson(r.val_loss_mix);
  if (r.job) j["job"] = *r.job;
  StampRecordVersion(&j);
  return j;
}

json ToJson(const EventRecord& r) {
  json j = r.fields.is_object() ? r.fields : json::object();
  j["event"] = r.event;
  if (r.step >= 0) j["step"] = r.step;
  StampRecordVersion(&j);
  return j;
}

json ToJson(const RunRecord& r) {
  return std::visit([](const auto& x) { return ToJson(x); }, r);
}

Result<RunRow> ParseRunRow(const json& j, std::string_view where) {
  TERN_ASSIGN_OR_RETURN(const int version, CheckRecordVersion(j, where));
  RunRow row;
  row.version = version;
  if (j.contains("event")) {
    if (!j["event"].is_string())
      return Status::InvalidArgument(TypeError(where, "event", "a string", j["event"]));
    const std::string event = j["event"].get<std::string>();
    if (event == "start") {
      TERN_ASSIGN_OR_RETURN(row.record, ReadStart(j, where));
    } else if (event == "end") {
      TERN_ASSIGN_OR_RETURN(row.record, ReadEnd(j, where));
    } else {
      EventRecord e;
      e.event = event;
      e.fields = j;
      e.fields.erase("event");
      e.fields.erase(kRunRecordVersionKey);
      if (j.contains("step")) {
        if (!j["step"].is_number_integer())
          return Status::InvalidArgument(TypeError(where, "step", "an integer", j["step"]));
        e.step = j["step"].get<int>();
        e.fields.erase("step");
      }
      row.record = std::move(e);
    }
  } else if (j.contains("loss")) {
    TERN_ASSIGN_OR_RETURN(row.record, ReadStep(j, where));
  } else if (j.contains("val_loss")) {
    TERN_ASSIGN_OR_RETURN(row.record, ReadEval(j, where));
  } else {
    return Status::InvalidArgument(fmt::format(
        "{}: a row with neither \"event\", \"loss\" nor \"val_loss\" is no row tern writes", where));
  }
  return row;
}

Result<RunRow> ParseRunLine(const std::string& line, std::string_view where) {
  const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: not a JSON object", where));
  return ParseRunRow(j, where);
}

Result<EndRecord> ReadSummaryFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot open {} (a run writes it when it finishes)", path));
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument(fmt::format("{}: not a JSON object", path));
  TERN_RETURN_IF_ERROR(CheckRecordVersion(j, path).status());
  if (j.value("event", "") != "end")
    return Status::InvalidArgument(fmt::format("{}: not a run summary (no \"event\": \"end\")", path));
  return ReadEnd(j, path);
}

}  // namespace tern
