#include "infer/choices.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace tern {
namespace {

// The first of `keys` that `j` has, or nullptr.
const nlohmann::json* Field(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end()) return &*it;
  }
  return nullptr;
}

Result<ChoiceItem> ParseItem(const nlohmann::json& j) {
  if (!j.is_object()) return Status::InvalidArgument("not a JSON object");
  ChoiceItem item;
  const nlohmann::json* ctx = Field(j, {"ctx", "context", "query", "question", "prompt"});
  if (!ctx || !ctx->is_string())
    return Status::InvalidArgument(
        "no context: give \"ctx\" (or context, query, question, prompt) as a string");
  item.context = ctx->get<std::string>();
  const nlohmann::json* endings = Field(j, {"endings", "choices"});
  if (!endings || !endings->is_array() || endings->size() < 2)
    return Status::InvalidArgument(
        "no endings: give \"endings\" (or choices) as a list of two or more strings");
  for (const auto& e : *endings) {
    if (!e.is_string() || e.get_ref<const std::string&>().empty())
      return Status::InvalidArgument("every ending must be a non-empty string");
    item.endings.push_back(e.get<std::string>());
  }
  const nlohmann::json* label = Field(j, {"label", "answer", "gold"});
  int64_t v = -1;
  if (label && label->is_number_integer()) {
    v = label->get<int64_t>();
  } else if (label && label->is_string()) {
    const std::string& s = label->get_ref<const std::string&>();
    if (!s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos)
      v = std::stoll(s);
  }
  if (v < 0 || v >= static_cast<int64_t>(item.endings.size()))
    return Status::InvalidArgument(fmt::format(
        "no valid label: give \"label\" (or answer, gold), the index of the right ending, 0 to {}",
        item.endings.size() - 1));
  item.label = static_cast<int>(v);
  return item;
}

}  // namespace

Result<std::vector<ChoiceItem>> ParseChoiceItems(std::string_view text, const std::string& where) {
  std::vector<ChoiceItem> items;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    line_no++;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::InvalidArgument(
          fmt::format("{} line {}: not JSON (one object per line, e.g. {{\"ctx\": \"...\", \"endings\": "
                      "[\"...\", \"...\"], \"label\": 0}})",
                      where, line_no));
    auto item = ParseItem(j);
    if (!item.ok()) return item.status().WithContext(fmt::format("{} line {}", where, line_no));
    items.push_back(std::move(item).value());
  }
  if (items.empty())
    return Status::InvalidArgument(where +
                                   " holds no item: one JSON object per line, with ctx, endings, label");
  return items;
}

Result<std::vector<ChoiceItem>> LoadChoiceItems(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok())
    return Status::NotFound(fmt::format(
        "cannot read --choices {}: give a JSON Lines file of multiple-choice items (docs/mlops.md)", path));
  return ParseChoiceItems(*text, path);
}

}  // namespace tern
