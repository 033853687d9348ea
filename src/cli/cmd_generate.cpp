#include "cli/command.h"

namespace tern::cli {

void AddGenerateCommand(CLI::App& root, CommandTable& table) {
  auto* sub = root.add_subcommand("generate", "(not built yet)");
  table.Add(sub, [] { return 1; });
}

}  // namespace tern::cli
