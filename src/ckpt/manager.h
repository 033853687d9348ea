// Checkpoint tiers, the asynchronous writer, retention, and finding the checkpoint to resume from.
//
// A save has three parts:
//   capture  on the training thread: the small state that changes every micro-batch (step, data position)
//            and must be read now;
//   copy     the bulk tensors into a host Snapshot (reused between saves), on the writer thread, while the
//            training thread runs the next forward and backward passes, which only read the weights and the
//            optimizer moments. The trainer calls WaitForSnapshot() before its next optimizer update, so
//            the copy always sees the state of the step being saved;
//   persist  checksums, writes, fsyncs, manifest, retention, on the writer thread.
// The training stall is capture + any wait at WaitForSnapshot (none when a forward/backward pass takes
// longer than the copy) + any wait for the previous save. At most one save is in flight; a new save waits
// for it or is skipped, by policy, and either is reported as a SaveEvent for metrics.jsonl.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/retention.h"
#include "ckpt/storage.h"

namespace tern::ckpt {

using StorageOpener = std::function<Result<std::unique_ptr<Storage>>(const std::string& uri)>;

struct TierOptions {
  std::string name;  // "fast", "durable", "best"
  std::string uri;   // a directory or s3://bucket/prefix
  int every = 0;     // periodic saves every N steps; 0 = none (the best tier saves on a new best val loss)
  RetentionPolicy keep;
};

struct ManagerOptions {
  std::vector<TierOptions> tiers;  // resume prefers earlier tiers when steps tie
  bool async = true;
  bool skip_when_busy = false;  // a save requested while one is in flight: skip it (true) or wait (false)
  S3Options s3;
  StorageOpener open_storage;  // empty = OpenStorage(uri, s3); tests inject fault doubles here
};

// What happened to one save in one tier.
struct SaveEvent {
  int64_t step = 0;
  std::string tier, kind, location;
  bool skipped = false;   // a save was in flight (skip policy)
  double stall_ms = 0;    // training thread blocked: previous save + capture + WaitForSnapshot
  double wait_ms = 0;     // the part of the stall spent waiting for the previous save
  double copy_ms = 0;     // writer: the bulk copy into host memory (overlapped with training)
  double persist_ms = 0;  // writer: checksums, writes, fsyncs, manifest
  uint64_t bytes = 0;
  std::vector<int64_t> removed;  // steps deleted by retention afterwards
  Status status;
};

class CheckpointManager {
 public:
  static Result<std::unique_ptr<CheckpointManager>> Open(ManagerOptions options);
  ~CheckpointManager();  // finishes the save in flight

  int num_tiers() const { return static_cast<int>(tiers_.size()); }
  int FindTier(const std::string& name) const;  // -1 when not configured
  const TierOptions& tier(int i) const { return tiers_[i].options; }
  Storage& storage(int i) { return *tiers_[i].storage; }

  using FillFn = std::function<Status(Snapshot&)>;
  // Saves step to `tiers`: `capture` runs here, `copy` (may be empty) on the writer, or here too when the
  // save is synchronous (`sync`, or async off). Capture errors are returned; copy and persist errors arrive
  // as SaveEvents (for synchronous saves they are there when Save returns).
  Status Save(int64_t step, const std::vector<int>& tiers, const std::string& kind,
              std::optional<double> val_loss, const FillFn& capture, FillFn copy = {}, bool sync = false);
  // Blocks until the save in flight has copied the state; call before changing what `copy` reads.
  void WaitForSnapshot();
  bool busy();
  void WaitIdle();
  std::vector<SaveEvent> TakeEvents();

  // Would a checkpoint with this validation loss be among the K best the tier keeps?
  bool WouldKeepBest(int tier, double val_loss);
  // The newest step with a manifest in the tier, or -1.
  int64_t NewestStep(int tier);

  // The newest checkpoint across tiers whose manifest and checksums verify; on equal steps the earlier tier
  // wins. Damaged ones are described in *skipped and passed over; so are step directories without a manifest
  // newer than the one taken (a save that never finished, e.g. a rank that died before every shard was
  // written), in *unfinished when given. `want` selects the files read (default all). NotFound when there is
  // none.
  Result<LoadedCheckpoint> LoadNewestValid(std::vector<std::string>* skipped, const FileFilter& want = {},
                                           std::vector<std::string>* unfinished = nullptr);

 private:
  struct Tier {
    TierOptions options;
    std::unique_ptr<Storage> storage;
    std::vector<std::pair<int64_t, double>> best;  // (step, val_loss) of the kept best, for WouldKeepBest
  };
  struct Job {
    std::vector<int> tiers;
    std::string kind;
    FillFn copy;
    bool copied = false;
    double stall_ms = 0, wait_ms = 0, fence_ms = 0, copy_ms = 0;
    Status copy_status;
  };

  CheckpointManager() = default;
  void Copy(Job* job);
  std::vector<SaveEvent> Persist(const Job& job);
  void WriterLoop();

  ManagerOptions options_;
  std::vector<Tier> tiers_;
  Snapshot snapshot_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;  // the save in flight
  bool stop_ = false;
  std::vector<SaveEvent> events_;
  std::thread writer_;
};

// Loads the checkpoint at `uri`: a step directory (".../step_00001200") or a tier root, whose newest
// valid checkpoint is taken.
Result<LoadedCheckpoint> LoadCheckpointAt(const std::string& uri, const StorageOpener& open,
                                          std::vector<std::string>* skipped, const FileFilter& want = {},
                                          std::vector<std::string>* unfinished = nullptr);

}  // namespace tern::ckpt
