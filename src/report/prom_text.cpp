#include "report/prom_text.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace tern::report {
namespace {

bool NameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Reads a metric or label name at *i.
std::string ReadName(std::string_view line, size_t* i) {
  const size_t start = *i;
  while (*i < line.size() && NameChar(line[*i], *i == start)) ++*i;
  return std::string(line.substr(start, *i - start));
}

// Parses {k="v",...} at *i (which is at '{'); false when malformed.
bool ReadLabels(std::string_view line, size_t* i, std::map<std::string, std::string>* labels) {
  ++*i;  // '{'
  for (;;) {
    while (*i < line.size() && line[*i] == ' ') ++*i;
    if (*i < line.size() && line[*i] == '}') {
      ++*i;
      return true;
    }
    const std::string key = ReadName(line, i);
    if (key.empty() || *i + 1 >= line.size() || line[*i] != '=' || line[*i + 1] != '"') return false;
    *i += 2;
    std::string value;
    for (;; ++*i) {
      if (*i >= line.size()) return false;
      char c = line[*i];
      if (c == '"') break;
      if (c == '\\') {
        if (++*i >= line.size()) return false;
        c = line[*i] == 'n' ? '\n' : line[*i];
        if (line[*i] != 'n' && line[*i] != '\\' && line[*i] != '"') return false;
      }
      value += c;
    }
    ++*i;  // closing quote
    (*labels)[key] = std::move(value);
    while (*i < line.size() && line[*i] == ' ') ++*i;
    if (*i < line.size() && line[*i] == ',') ++*i;
  }
}

bool ReadValue(std::string_view token, double* v) {
  if (token == "+Inf" || token == "Inf") {
    *v = INFINITY;
    return true;
  }
  if (token == "-Inf") {
    *v = -INFINITY;
    return true;
  }
  if (token == "NaN") {
    *v = NAN;
    return true;
  }
  const std::string s(token);
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// "# TYPE name type" -> types[name] = type; other comments are ignored.
void ReadTypeComment(std::string_view line, std::map<std::string, std::string>* types) {
  constexpr std::string_view kType = "TYPE";
  size_t i = line.find_first_not_of(" \t", 1);  // after '#'
  if (i == std::string_view::npos || line.substr(i, kType.size()) != kType) return;
  i += kType.size();
  if (i >= line.size() || (line[i] != ' ' && line[i] != '\t')) return;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
  std::string name = ReadName(line, &i);
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
  const size_t end = line.find_first_of(" \t", i);
  std::string type(line.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
  if (!name.empty() && !type.empty()) (*types)[std::move(name)] = std::move(type);
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The type of a sample's family: its own name's, else (X_bucket, X_sum, X_count) X's.
std::string FamilyType(const std::string& name, const std::map<std::string, std::string>& types) {
  if (auto it = types.find(name); it != types.end()) return it->second;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"})
    if (EndsWith(name, suffix))
      if (auto it = types.find(name.substr(0, name.size() - suffix.size())); it != types.end())
        return it->second;
  return "";
}

}  // namespace

Result<std::vector<PromSample>> ParsePromText(std::string_view text) {
  std::vector<PromSample> out;
  std::map<std::string, std::string> types;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    line_no++;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
    if (i == line.size()) continue;
    if (line[i] == '#') {
      ReadTypeComment(line.substr(i), &types);
      continue;
    }
    auto bad = [&](const char* what) {
      return Status::InvalidArgument(
          fmt::format("metrics line {}: {}: '{}'", line_no, what,
                      std::string(line.substr(0, std::min<size_t>(line.size(), 120)))));
    };
    PromSample s;
    s.name = ReadName(line, &i);
    if (s.name.empty()) return bad("expected a metric name");
    if (i < line.size() && line[i] == '{' && !ReadLabels(line, &i, &s.labels)) return bad("malformed labels");
    if (i >= line.size() || (line[i] != ' ' && line[i] != '\t'))
      return bad("expected a value after the name");
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
    const size_t end = line.find_first_of(" \t", i);
    if (!ReadValue(line.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i),
                   &s.value))
      return bad("the value is not a number");
    s.type = FamilyType(s.name, types);
    out.push_back(std::move(s));
  }
  return out;
}

double PromMetrics::Sum(const std::string& name, const std::map<std::string, std::string>& match) const {
  double sum = 0;
  for (const PromSample& s : samples_) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      const auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        all = false;
        break;
      }
    }
    if (all) sum += s.value;
  }
  return sum;
}

bool PromMetrics::Has(const std::string& name) const {
  for (const PromSample& s : samples_)
    if (s.name == name) return true;
  return false;
}

std::optional<std::map<std::string, std::string>> PromMetrics::Labels(const std::string& name) const {
  for (const PromSample& s : samples_)
    if (s.name == name) return s.labels;
  return std::nullopt;
}

bool IsCumulative(const PromSample& s) {
  if (s.type == "counter") return true;
  if (s.type == "histogram")
    return EndsWith(s.name, "_bucket") || EndsWith(s.name, "_sum") || EndsWith(s.name, "_count");
  if (s.type == "summary") return EndsWith(s.name, "_sum") || EndsWith(s.name, "_count");
  if (!s.type.empty() && s.type != "untyped") return false;
  for (std::string_view suffix : {"_total", "_bucket", "_sum", "_count"})
    if (EndsWith(s.name, suffix)) return true;
  return false;
}

namespace {

using SeriesValues = std::map<std::pair<std::string, std::map<std::string, std::string>>, double>;

SeriesValues CumulativeValues(const PromMetrics& m) {
  SeriesValues v;
  for (const PromSample& s : m.samples())
    if (IsCumulative(s)) v[{s.name, s.labels}] = s.value;
  return v;
}

// The first cumulative sample of `now` below its value in `before`: "NAME fell from A to B"; else empty.
std::string FirstFall(const PromMetrics& now, const SeriesValues& before) {
  for (const PromSample& s : now.samples()) {
    if (!IsCumulative(s)) continue;
    const auto it = before.find({s.name, s.labels});
    if (it != before.end() && s.value < it->second)
      return fmt::format("{} fell from {} to {}", s.name, it->second, s.value);
  }
  return "";
}

// `now` with each cumulative sample less its value in `before` (kept whole when new since).
PromMetrics Subtract(const PromMetrics& now, const SeriesValues& before) {
  std::vector<PromSample> out = now.samples();
  for (PromSample& s : out) {
    if (!IsCumulative(s)) continue;
    if (const auto it = before.find({s.name, s.labels}); it != before.end()) s.value -= it->second;
  }
  return PromMetrics(std::move(out));
}

}  // namespace

Result<PromMetrics> PromDelta(const PromMetrics& now, const PromMetrics& before) {
  const SeriesValues earlier = CumulativeValues(before);
  if (std::string fall = FirstFall(now, earlier); !fall.empty())
    return Status::InvalidArgument(fall +
                                   " between the two scrapes: the server restarted in between; diagnose the "
                                   "newer scrape alone (without --since)");
  return Subtract(now, earlier);
}

PromWindow PromSince(const PromMetrics& now, const PromMetrics& before) {
  const char* start = "process_start_time_seconds";
  if (now.Has(start) && before.Has(start) && now.Sum(start) != before.Sum(start))
    return {now, fmt::format("{} changed from {} to {}", start, before.Sum(start), now.Sum(start))};
  const SeriesValues earlier = CumulativeValues(before);
  if (std::string fall = FirstFall(now, earlier); !fall.empty()) return {now, fall};
  return {Subtract(now, earlier), ""};
}

}  // namespace tern::report
