#include "report/html.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tern::report {

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON inside <script>: "</" would end the element, so it is written "<\/" (the same string to JSON).
std::string ScriptSafeJson(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += json[i];
    }
  }
  return out;
}

void FillMarker(std::string* text, const std::string& marker, const std::string& value) {
  const size_t at = text->find(marker);
  if (at != std::string::npos) text->replace(at, marker.size(), value);
}

Result<std::string> ReadChartJs() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("TERN_CHARTJS"); env && *env)
    paths.push_back(env);
  else
    for (const char* p : kChartJsPaths) paths.push_back(p);
  for (const auto& p : paths) {
    if (!std::filesystem::is_regular_file(p)) continue;
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (!in.bad() && ss.str().size() > 1000) return ss.str();
  }
  return Status::NotFound(fmt::format(
      "Chart.js not found (looked for {}): the report inlines it so that the page opens offline. Install "
      "Debian's libjs-chart.js (scripts/install-deps does), or set TERN_CHARTJS to a chart.umd.js",
      fmt::join(paths, ", ")));
}

std::string RenderHtml(const std::vector<RunData>& runs, const std::string& chartjs,
                       const std::string& diagnosis_html) {
  std::string title = "tern report:";
  for (const auto& r : runs) title += " " + r.name;
  std::string head = kPageHead, body = kPageBody;
  FillMarker(&head, "@@TITLE@@", HtmlEscape(title));
  FillMarker(
      &body, "@@DIAGNOSIS@@",
      diagnosis_html.empty()
          ? "<div class=\"note\" id=\"diagnosis-findings\">No findings in this report: the diagnosis rules "
            "(<code>tern diagnose RUN_DIR</code>) fill this section.</div>"
          : "<div id=\"diagnosis-findings\">" + diagnosis_html + "</div>");
  // The data last: it is the one part that may be large.
  const size_t at = body.find("@@DATA@@");
  std::string out;
  const std::string data = ScriptSafeJson(ReportJson(runs, /*with_series=*/true).dump());
  out.reserve(head.size() + chartjs.size() + body.size() + data.size());
  out += head;
  out += chartjs;
  out.append(body, 0, at);
  out += data;
  out.append(body, at + 8, std::string::npos);
  return out;
}

}  // namespace tern::report
