// ReadMetricsFile: a whole metrics.jsonl, its step and evaluation rows through simdjson (run_record_fields.h
// reads them with the same typed reader as nlohmann's objects), every other line through ParseRunLine.
#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

#include "metrics/run_record.h"
#include "metrics/run_record_fields.h"

namespace tern {
namespace {

using namespace run_record_internal;  // NOLINT(google-build-using-namespace): the reader's own inside

// The fast path of ReadMetricsFile, for the rows a long run has by the hundred thousand: a step or an
// evaluation row, parsed by simdjson and read by the same typed reader as nlohmann's objects. It answers
// false for anything else (other rows, text that is not a JSON object, a row the reader would refuse, a
// backslash escape, a negative zero); the caller then reads the line with nlohmann, whose answer is the
// reference (run_record_test and fuzz/metrics_jsonl check that both agree wherever this one answers).
// `line` must be followed by simdjson::SIMDJSON_PADDING readable bytes.
bool ReadFlatRow(simdjson::dom::parser& parser, std::string_view line, FlatObject* o, RunRow* row) {
  if (line.find('\\') != std::string_view::npos) return false;
  simdjson::dom::object obj;
  if (parser.parse(line.data(), line.size(), /*realloc_if_needed=*/false).get(obj) != simdjson::SUCCESS)
    return false;
  o->Clear();
  for (simdjson::dom::key_value_pair field : obj) {
    FlatValue v;
    simdjson::error_code e = simdjson::SUCCESS;
    switch (field.value.type()) {
      case simdjson::dom::element_type::INT64:
        v.type = FT::kInt;
        e = field.value.get(v.i);
        break;
      case simdjson::dom::element_type::UINT64:
        v.type = FT::kUint;
        e = field.value.get(v.u);
        break;
      case simdjson::dom::element_type::DOUBLE:
        v.type = FT::kDouble;
        e = field.value.get(v.d);
        if (v.d == 0 && std::signbit(v.d)) return false;  // "-0": an integer to nlohmann
        break;
      case simdjson::dom::element_type::BOOL:
        v.type = FT::kBool;
        e = field.value.get(v.b);
        break;
      case simdjson::dom::element_type::STRING:
        v.type = FT::kString;
        e = field.value.get(v.s);
        break;
      case simdjson::dom::element_type::NULL_VALUE:
        v.type = FT::kNull;
        break;
      default:  // an array or object: no step or evaluation field is one but an evaluation's val_loss_mix,
                // which the reference reader reads (a field unknown to this version is skipped)
        if (field.key == "val_loss_mix") return false;
        break;
    }
    if (e != simdjson::SUCCESS) return false;
    o->Add(field.key, v);
  }
  int version = 0;
  if (const FlatValue* v = o->Find(kRunRecordVersionKey)) {
    if (!IsUnsigned(*v) || AsInteger<uint64_t>(*v) > static_cast<uint64_t>(kRunRecordVersion)) return false;
    version = AsInteger<int>(*v);
  }
  if (o->Find("event")) return false;
  if (o->Find("loss")) {
    auto r = ReadStep(*o, {});
    if (!r.ok()) return false;
    row->record = std::move(r).value();
  } else if (o->Find("val_loss")) {
    auto r = ReadEval(*o, {});
    if (!r.ok()) return false;
    row->record = std::move(r).value();
  } else {
    return false;
  }
  row->version = version;
  return true;
}

}  // namespace

Result<std::vector<RunRow>> ReadMetricsFile(const std::string& path) {
  // The whole file at once (simdjson wants padding after the text); a 100,000-step run is about 35 MB.
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS)
    return Status::NotFound(fmt::format("cannot open {}: is it a run directory's metrics.jsonl?", path));
  simdjson::dom::parser parser;
  FlatObject flat;
  std::vector<RunRow> rows;
  std::string where;
  const char* const data = text.data();
  const size_t size = text.size();
  rows.reserve(static_cast<size_t>(std::count(data, data + size, '\n')) + 1);  // no regrowth: rows are big
  size_t begin = 0;
  for (int n = 1; begin < size; n++) {
    const void* nl = std::memchr(data + begin, '\n', size - begin);
    const size_t end = nl ? static_cast<size_t>(static_cast<const char*>(nl) - data) : size;
    const std::string_view line(data + begin, end - begin);
    begin = end + 1;
    RunRow row;
    if (ReadFlatRow(parser, line, &flat, &row)) {
      rows.push_back(std::move(row));
      continue;
    }
    const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // torn by a kill mid-write
    where.assign(path).append(" line ").append(std::to_string(n));
    TERN_ASSIGN_OR_RETURN(row, ParseRunRow(j, where));
    rows.push_back(std::move(row));
  }
  return rows;
}

bool ReadStepOrEvalFast(const std::string& line, RunRow* row) {
  simdjson::padded_string padded(line);
  simdjson::dom::parser parser;
  FlatObject flat;
  return ReadFlatRow(parser, std::string_view(padded.data(), padded.size()), &flat, row);
}

}  // namespace tern
