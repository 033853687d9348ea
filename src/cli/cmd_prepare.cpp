#include "cli/command.h"

namespace tern::cli {

// Placeholder until the prepare component lands.
void AddPrepareCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("prepare", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
