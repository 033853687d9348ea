// The HTML page of `tern report`: one self-contained file (Chart.js inlined, the data as JSON, no network).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "report/run_data.h"

namespace tern::report {

// Where Chart.js is looked for (Debian's libjs-chart.js ships one of them), first found wins; the
// environment variable TERN_CHARTJS names another file.
inline constexpr const char* kChartJsPaths[] = {"/usr/share/javascript/chart.js/chart.umd.js",
                                                "/usr/share/javascript/chart.js/chart.min.js",
                                                "/usr/share/javascript/chart.js/chart.js"};
// The text of Chart.js, or an error saying to run scripts/install-deps (package libjs-chart.js).
[[nodiscard]] Result<std::string> ReadChartJs();

// The page. `diagnosis_html` goes into the Diagnosis section (tern diagnose's findings, HTML already
// escaped); empty: a line saying where the findings will come from.
std::string RenderHtml(const std::vector<RunData>& runs, const std::string& chartjs,
                       const std::string& diagnosis_html = "");

// The page helpers, shared with the FinOps page (finops_html.cpp): text for HTML (< > & " escaped); JSON
// for inside <script> ("</" would end the element, so it is written "<\\/", the same string to JSON); the one
// `marker` in `text` replaced.
std::string HtmlEscape(const std::string& text);
std::string ScriptSafeJson(const std::string& json);
void FillMarker(std::string* text, const std::string& marker, const std::string& value);

// The template's two halves (html_template.cpp): Chart.js goes between them.
extern const char* const kPageHead;
extern const char* const kPageBody;

}  // namespace tern::report
