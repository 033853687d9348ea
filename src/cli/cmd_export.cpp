#include "cli/command.h"

namespace tern::cli {

void AddExportCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("export", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
