// Parsing and printing of the quantities a plan talks in: token and parameter counts ("10B", "500M",
// "1.3e9"), durations ("48h", "90m", "2d") and money. Parsing returns Status so a typo in a flag is a
// message, not a crash.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::plan {

// "10B" -> 1e10, "500M", "124k", "2.5T", "1.3e9", "1000000". Suffixes are decimal (k=1e3 ... T=1e12),
// case-insensitive. `what` names the flag in the error ("--tokens").
Result<double> ParseCount(std::string_view text, std::string_view what);

// "48h", "90m", "2d", "3600s", "1.5h" -> hours. A unit is required: a bare "48" is ambiguous.
Result<double> ParseDurationHours(std::string_view text, std::string_view what);

// Money: "500", "$500", "1.2k".
Result<double> ParseMoney(std::string_view text, std::string_view what);

std::string FormatCount(double n);      // 1.23B, 456M, 12.3k, 999
std::string FormatHours(double hours);  // "45 min", "6.9 h", "3.2 d"
std::string FormatUsd(double usd);      // "$0.0034", "$12.35", "$1,234"
std::string FormatBytes(double bytes);  // "1.49 GB" (decimal, as clouds bill)
std::string FormatGiB(double bytes);    // "71.2 GiB" (binary, as GPU memory is sold)

// Splits "aws,gcp" into trimmed, non-empty items.
std::vector<std::string> SplitList(std::string_view text);

}  // namespace tern::plan
