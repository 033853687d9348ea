// Each subcommand lives in its own cmd_*.cpp and registers itself here: it adds a CLI11 subcommand with
// its options and a function that runs it and returns the process exit code. main() runs the one given.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace tern::cli {

struct CommandTable {
  std::vector<std::pair<CLI::App*, std::function<int()>>> entries;
  void Add(CLI::App* sub, std::function<int()> run) { entries.emplace_back(sub, std::move(run)); }
};

void AddPrepareCommand(CLI::App& root, CommandTable& table);
void AddTrainCommand(CLI::App& root, CommandTable& table);
void AddBenchCommand(CLI::App& root, CommandTable& table);
void AddGenerateCommand(CLI::App& root, CommandTable& table);
void AddEvalCommand(CLI::App& root, CommandTable& table);
void AddPipelineCommand(CLI::App& root, CommandTable& table);
void AddExportCommand(CLI::App& root, CommandTable& table);
void AddPlanCommand(CLI::App& root, CommandTable& table);
void AddServeCommand(CLI::App& root, CommandTable& table);
void AddCkptCommand(CLI::App& root, CommandTable& table);
void AddRunCommand(CLI::App& root, CommandTable& table);
void AddJobCommand(CLI::App& root, CommandTable& table);
void AddDiagnoseCommand(CLI::App& root, CommandTable& table);
void AddReportCommand(CLI::App& root, CommandTable& table);
void AddSimulateCommand(CLI::App& root, CommandTable& table);
void AddModelsCommand(CLI::App& root, CommandTable& table);
void AddSweepCommand(CLI::App& root, CommandTable& table);

}  // namespace tern::cli
