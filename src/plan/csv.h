// A small CSV reader for the catalog files: RFC-4180 quoting, CRLF tolerated, and every row keeps its
// 1-based line number so that validation errors can say "file:line: what".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::plan {

struct CsvRow {
  int line = 0;  // 1-based line in the file (the header is line 1)
  std::vector<std::string> fields;
};

struct CsvTable {
  std::string file;  // as given, for messages
  std::vector<std::string> header;
  std::vector<CsvRow> rows;

  int Column(std::string_view name) const;  // -1 if absent
  bool Has(std::string_view name) const { return Column(name) >= 0; }
  // "file:line: " prefix for messages about a row.
  std::string Where(const CsvRow& row) const;
};

// Parses `text`; a row whose field count differs from the header's is an error (file:line).
// Blank lines and lines starting with '#' are skipped.
Result<CsvTable> ParseCsv(std::string_view text, const std::string& file);
Result<CsvTable> ReadCsvFile(const std::string& path);

// Field accessors that turn bad values into "file:line: column 'x': ..." errors.
// `col` < 0 (column absent) reads as empty.
std::string Field(const CsvRow& row, int col);
Result<std::optional<double>> OptionalNumber(const CsvTable& t, const CsvRow& row, int col);
Result<std::string> RequiredText(const CsvTable& t, const CsvRow& row, int col);

}  // namespace tern::plan
