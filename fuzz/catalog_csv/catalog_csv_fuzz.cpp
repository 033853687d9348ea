// The planner's catalog CSVs (LoadCatalogFromTexts: CSV rows, then the checks on each offer). The input is
// one or more files, each introduced by a line "==> NAME <==" (gpus.csv, gpu_instances.csv,
// instance_network.csv, or any name: a user file); text before the first such line is gpu_instances.csv.
// Without a gpus.csv of its own the input is read with the shipped data/catalog/gpus.csv.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/file_util.h"
#include "plan/catalog.h"

namespace {
std::string g_shipped_gpus;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto text = tern::ReadFileToString(std::string(TERN_SOURCE_DIR) + "/data/catalog/gpus.csv");
  if (text.ok()) g_shipped_gpus = *text;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::pair<std::string, std::string>> files;
  std::string name = "gpu_instances.csv";
  bool has_gpus = false;
  while (true) {
    const size_t mark = text.find("==> ");
    const size_t end = mark == std::string_view::npos ? std::string_view::npos : text.find(" <==\n", mark);
    if (end == std::string_view::npos) {
      files.emplace_back(name, std::string(text));
      break;
    }
    if (mark > 0 || name != "gpu_instances.csv") files.emplace_back(name, std::string(text.substr(0, mark)));
    name = std::string(text.substr(mark + 4, end - mark - 4));
    has_gpus = has_gpus || name == "gpus.csv";
    text = text.substr(end + 5);
  }
  if (!has_gpus) files.insert(files.begin(), {"gpus.csv", g_shipped_gpus});
  auto catalog = tern::plan::LoadCatalogFromTexts(files, tern::plan::PlanDefaults());
  (void)catalog.ok();
  return 0;
}
