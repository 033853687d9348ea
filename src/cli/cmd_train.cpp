#include "cli/command.h"

namespace tern::cli {

void AddTrainCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("train", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
