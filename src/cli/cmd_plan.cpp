#include "cli/command.h"

namespace tern::cli {

// Placeholder until the plan component lands.
void AddPlanCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("plan", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
