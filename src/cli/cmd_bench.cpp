#include "cli/command.h"

namespace tern::cli {

void AddBenchCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("bench", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
