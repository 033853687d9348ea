// The checkpoint format (docs/checkpoints.md is the reference): one directory (or key prefix) per step,
//
//   step_00001200/tensors.safetensors     fp32 weights, tern's parameter tensors (safetensors)
//   step_00001200/optimizer.safetensors   AdamW first and second moments "adam.m", "adam.v" (safetensors)
//   step_00001200/trainer.json            step, data position, RNG seeds, LR position, config, tokenizer
//   step_00001200/manifest.json           written last: every file's size and xxh3-64
//
// Data parallel with ZeRO-1 (train/train_checkpoint.h): optimizer.safetensors is replaced by one file per
// rank, optimizer-00001-of-00002.safetensors, each written by its rank; rank 0 writes the manifest, listing
// them all, once every rank's file is durable (Snapshot::gather_files).
//
// A checkpoint exists when its manifest exists and every file it names has the recorded size and checksum;
// anything else under a step directory is debris from a save that did not finish.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/safetensors_image.h"
#include "ckpt/storage.h"

namespace tern::ckpt {

inline constexpr char kManifestName[] = "manifest.json";
inline constexpr char kManifestFormat[] = "tern-checkpoint";
inline constexpr int kFormatVersion = 1;

std::string StepDirName(int64_t step);  // "step_00001200"
std::optional<int64_t> ParseStepDirName(const std::string& name);
std::string Xxh3Hex(std::string_view data);  // 16 lowercase hex digits

struct ManifestFile {
  std::string name;
  uint64_t bytes = 0;
  std::string xxh3;
};

struct Manifest {
  int64_t step = 0;
  std::string kind;                // periodic | final | emergency | best
  std::string created_utc;         // ISO 8601
  std::string config_fingerprint;  // xxh3 of the settings resume depends on
  std::string tokenizer;           // the tokenizer's fingerprint
  std::optional<double> val_loss;  // the latest validation loss at this step, when known
  std::vector<ManifestFile> files;
  nlohmann::json extra;  // informative fields (model shape, precision, ...)

  uint64_t total_bytes() const;
  std::string ToJson() const;
  static Result<Manifest> Parse(std::string_view json);
};

// The state to persist, in host memory. The trainer fills it (the blocking part of a save); the writer
// publishes it. Images are kept between saves, so steady-state saves allocate nothing.
struct Snapshot {
  int64_t step = 0;
  std::vector<std::pair<std::string, std::unique_ptr<SafetensorsImage>>> images;
  std::map<std::string, std::string> small_files;  // trainer.json, ...
  Manifest manifest;  // step, kind, fingerprints, val_loss; files are filled in when persisted
  // Data parallel: the files other processes write into the same step directory. When set, PersistSnapshot
  // calls it exactly once per storage, after this process's data files are durable (or failed: `mine` says
  // which), and before the manifest: it waits for the others (a barrier) and returns their entries, which
  // the manifest then lists too. An error leaves the step unpublished (no manifest).
  std::function<Result<std::vector<ManifestFile>>(Storage& storage, const Status& mine)> gather_files;

  uint64_t bytes() const;
};

struct PersistStats {
  uint64_t bytes = 0;
  double seconds = 0;
  std::string location;  // storage uri + "/" + step dir
};

// One file that another process lists in its manifest (see Snapshot::gather_files): Put, SyncDir, and its
// manifest entry.
Result<ManifestFile> PutCheckpointFile(Storage& storage, int64_t step, const std::string& name,
                                       std::string_view bytes);

// Publishes `snap` under StepDirName(step): data files, SyncDir, manifest.json, SyncDir. On failure the
// partial files are removed (best effort) so a full disk is not left fuller; an older checkpoint is
// never touched.
Result<PersistStats> PersistSnapshot(Snapshot& snap, Storage& storage);

// A step directory found in a storage.
struct CheckpointRef {
  int64_t step = 0;
  std::string dir;  // "step_00001200"
  bool has_manifest = false;
  uint64_t bytes = 0;  // of the objects present
};
// Every step directory, oldest first. Other keys are ignored.
Result<std::vector<CheckpointRef>> ListCheckpoints(Storage& storage);

struct VerifyReport {
  int64_t step = 0;
  std::string dir;
  bool ok = false;
  std::vector<std::string> problems;  // "tensors.safetensors: 512 bytes, manifest says 1024 (truncated)"
  std::optional<Manifest> manifest;
};
// Reads every file of the checkpoint and checks it against the manifest (and that the safetensors and JSON
// files parse).
VerifyReport VerifyCheckpoint(Storage& storage, const std::string& dir);

struct LoadedCheckpoint {
  Manifest manifest;
  std::map<std::string, std::string> files;  // name -> verified bytes
  std::string location;
};
// Which of a manifest's files a process reads on resume (ZeRO-1: only the optimizer shards that cover its
// own range); empty = all. Files not wanted are neither read nor checked.
using FileFilter = std::function<bool(const std::string& name)>;
// VerifyCheckpoint that keeps the bytes (of the files `want` selects). Corruption lists the problems.
Result<LoadedCheckpoint> LoadCheckpoint(Storage& storage, const std::string& dir,
                                        const FileFilter& want = {});

}  // namespace tern::ckpt
