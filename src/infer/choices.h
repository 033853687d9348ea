// Multiple-choice evaluation sets (`tern eval --choices`, docs/mlops.md): one JSON object per line, a context
// and its candidate endings, one of them right. HellaSwag's own files read as they are
// ({"ctx": ..., "endings": [...], "label": 2}); other sets may name the fields context|query|question|prompt,
// choices and answer|gold. This is the format of the lm-evaluation-harness's multiple-choice tasks and of
// llm.c's HellaSwag evaluation, so the same file scores a tern model and any other.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern {

struct ChoiceItem {
  std::string context;               // may be empty: the endings alone are scored
  std::vector<std::string> endings;  // at least two
  int label = 0;                     // index of the right ending
};

// Parses JSON Lines text (`where` names it in messages: "FILE line N: ..."). Blank lines are skipped; a line
// that is not an object with a context, two or more string endings and a label in range is an error naming
// the line and what is wrong; so is a text with no item. A label may be a number or a string of digits
// (some exports quote it).
Result<std::vector<ChoiceItem>> ParseChoiceItems(std::string_view text, const std::string& where);
Result<std::vector<ChoiceItem>> LoadChoiceItems(const std::string& path);

}  // namespace tern
