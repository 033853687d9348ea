#include "plan/csv.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/file_util.h"

namespace tern::plan {

int CsvTable::Column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string CsvTable::Where(const CsvRow& row) const {
  return fmt::format("{}:{}: ", file, row.line);
}

namespace {

// Splits one physical line into fields. Quoted fields may hold commas and doubled quotes; a quoted
// field spanning lines is not supported (catalog rows never need one) and is reported as an error.
Status SplitLine(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += c;
      }
    } else if (c == '"' && cur.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (c == ',') {
      out->push_back(std::move(cur));
      cur.clear();
      was_quoted = false;
    } else {
      cur += c;
    }
  }
  if (quoted) return Status::InvalidArgument("unterminated quoted field");
  out->push_back(std::move(cur));
  // Trim unquoted whitespace: hand-edited user catalogs often have "aws, us-east-1".
  for (auto& f : *out) {
    size_t b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
    f = (b == std::string::npos) ? std::string() : f.substr(b, e - b + 1);
  }
  return Status::Ok();
}

}  // namespace

Result<CsvTable> ParseCsv(std::string_view text, const std::string& file) {
  CsvTable t;
  t.file = file;
  int line_no = 0;
  size_t pos = 0;
  bool have_header = false;
  std::vector<std::string> fields;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos || line.front() == '#') continue;
    Status st = SplitLine(line, &fields);
    if (!st.ok()) return Status::InvalidArgument(fmt::format("{}:{}: {}", file, line_no, st.message()));
    if (!have_header) {
      t.header = fields;
      have_header = true;
      continue;
    }
    if (fields.size() != t.header.size()) {
      return Status::InvalidArgument(fmt::format("{}:{}: expected {} fields (as in the header), got {}", file,
                                                 line_no, t.header.size(), fields.size()));
    }
    t.rows.push_back(CsvRow{line_no, fields});
  }
  if (!have_header)
    return Status::InvalidArgument(fmt::format("{}:1: empty file, expected a CSV header", file));
  return t;
}

Result<CsvTable> ReadCsvFile(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseCsv(text, path);
}

std::string Field(const CsvRow& row, int col) {
  if (col < 0 || static_cast<size_t>(col) >= row.fields.size()) return {};
  return row.fields[static_cast<size_t>(col)];
}

Result<std::optional<double>> OptionalNumber(const CsvTable& t, const CsvRow& row, int col) {
  std::string s = Field(row, col);
  if (s.empty()) return std::optional<double>();
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) {
    return Status::InvalidArgument(
        fmt::format("{}column '{}': '{}' is not a number", t.Where(row), t.header[col], s));
  }
  if (v < 0) {
    return Status::InvalidArgument(
        fmt::format("{}column '{}': {} is negative", t.Where(row), t.header[col], s));
  }
  return std::optional<double>(v);
}

Result<std::string> RequiredText(const CsvTable& t, const CsvRow& row, int col) {
  std::string s = Field(row, col);
  if (s.empty())
    return Status::InvalidArgument(fmt::format("{}column '{}' is empty", t.Where(row), t.header[col]));
  return s;
}

}  // namespace tern::plan
