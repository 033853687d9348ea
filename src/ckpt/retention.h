// Which checkpoints a tier keeps, and garbage collection that removes the rest.
//
// Kept: the newest valid checkpoint (always), the keep_last newest valid ones, every step that is a
// multiple of keep_every (milestones), and the keep_best with the lowest validation loss. Everything else
// goes, including debris (step directories without a manifest) older than the newest valid checkpoint.
// Debris newer than it may be a save in flight in another process: it is left alone unless the caller
// knows no save is running (the trainer's own writer thread does; `tern ckpt gc --force` says so).
//
// Deleting mirrors writing: the manifest goes first and that is made durable, then the data files. A
// crash in the middle leaves debris, never a manifest that names missing files.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/storage.h"

namespace tern::ckpt {

struct RetentionPolicy {
  int keep_last = 0;   // 0 = keep every valid checkpoint
  int keep_every = 0;  // 0 = no milestones
  int keep_best = 0;   // 0 = none kept for their validation loss
};

struct RetentionEntry {
  int64_t step = 0;
  bool valid = false;  // has a manifest (gc does not re-read the data; `tern ckpt verify` does)
  std::optional<double> val_loss;
};

struct RetentionPlan {
  std::vector<int64_t> keep, remove;  // steps, ascending
};
RetentionPlan PlanRetention(const std::vector<RetentionEntry>& entries, const RetentionPolicy& policy,
                            bool no_save_in_flight);

// Removes one checkpoint: manifest, SyncDir, every other object under the step directory, SyncDir.
Status DeleteCheckpoint(Storage& storage, const std::string& dir);

struct GcReport {
  std::vector<int64_t> kept, removed;
  uint64_t bytes_freed = 0;
};
// Lists the tier, reads the manifests (for val_loss), applies the policy. dry_run only reports.
// verify_newest: checksum the checkpoints from the newest down until one verifies; the damaged ones above it
// count as debris, so "the newest valid checkpoint" kept is one that really loads (tern ckpt gc does this;
// the trainer's writer skips it: it has just written and synced the newest itself).
Result<GcReport> CollectGarbage(Storage& storage, const RetentionPolicy& policy, bool no_save_in_flight,
                                bool dry_run = false, bool verify_newest = false);

}  // namespace tern::ckpt
