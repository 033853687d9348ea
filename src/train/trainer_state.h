// trainer.json of a checkpoint (train/train_checkpoint.h writes it) parsed into plain values, without the
// model: the pure half of RestoreTrainState, fuzzed (fuzz/README.md).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "backend/loss_scaler.h"
#include "core/status.h"
#include "data/loader.h"

namespace tern {

struct TrainProgress {
  int step = 0;  // optimizer steps done
  uint64_t tokens_seen = 0;
  double train_seconds = 0;
  LoaderPosition loader;  // of the next training batch
  int adam_t = -1;        // AdamW updates applied; -1 = step (checkpoints from before fp16 lack the field)
  std::optional<LossScaler::State> loss_scale;  // fp16 runs only
};

struct SavedTrainerState {
  std::map<std::string, std::string> config;  // every config key as text, as TrainConfigValues gave it
  std::string tokenizer;                      // fingerprint
  uint64_t train_tokens = 0, train_windows = 0;
  std::string train_content;  // DataIdentity::content ("" when the checkpoint predates it)
  TrainProgress progress;
};

// Corruption (naming `location`/trainer.json) when the text is not tern trainer state or a field has the
// wrong type.
Result<SavedTrainerState> ParseTrainerState(std::string_view text, const std::string& location);

}  // namespace tern
