// The speculative-decoding flags of `tern serve` and `tern generate` (infer/speculative.h), vLLM's ngram
// method: --speculative-tokens, --prompt-lookup-max, --prompt-lookup-min, --speculative-max-batch.
#pragma once

#include <CLI/CLI.hpp>

#include "infer/speculative.h"

namespace tern::cli {

void AddSpeculativeOptions(CLI::App* sub, SpeculativeOptions* spec);

}  // namespace tern::cli
