// The trainer's side of checkpoints: what state goes into which file, and how it comes back.
//
//   tensors.safetensors    fp32 weights, one tensor per entry of GptParamLayout (tern names and shapes,
//                          e.g. "qkvw" [L, 3C, C]); __metadata__ carries the model shape. `tern ckpt export`
//                          converts it to Hugging Face names.
//   optimizer.safetensors  "adam.m" and "adam.v" [trainable], flat in the same parameter order: every
//                          parameter, or with LoRA (train.lora) the adapters (the tail of
//                          tensors.safetensors).
//   optimizer-00001-of-00002.safetensors
//                          ZeRO-1 at W > 1, instead of optimizer.safetensors: rank r's shard of the moments,
//                          "adam.m" and "adam.v" [ShardOf(trainable, W, r).count], its place in __metadata__
//                          (tern.shard_offset, tern.shard_count, tern.num_params); written by rank r itself,
//                          listed (with its checksum) in rank 0's manifest.
//   trainer.json           step, adam_t (AdamW's t: applied updates, = step unless fp16 skipped some), tokens
//                          seen, the loader position, seeds, LR position, loss scale (fp16: scale,
//                          good_steps, skipped_steps; null for bf16 and fp32), precision, tokenizer, config.
// The bf16 weight copy is not stored: SetParameters re-derives it from the fp32 master weights, exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/loss_scaler.h"
#include "ckpt/format.h"
#include "ckpt/manager.h"
#include "data/loader.h"
#include "model/gpt.h"
#include "train/train_config.h"
#include "train/trainer_state.h"

namespace tern {

// What identifies the training data; resuming on different data is refused.
struct DataIdentity {
  std::string tokenizer;  // fingerprint
  uint64_t train_tokens = 0, train_windows = 0;
  // The train shards' content (DataLoader::content_fingerprint: XXH3 of the tokens, from the shard headers);
  // "" for shards written before tern recorded it. Compared on resume when both sides have one.
  std::string content;
};

// The two halves of a save (see ckpt/manager.h):
// CaptureTrainMeta, on the training thread: trainer.json (step, data position, ...) and the manifest's
// fields.
Status CaptureTrainMeta(const Gpt& model, const TrainConfig& cfg, const DataIdentity& data,
                        const TrainProgress& progress, ckpt::Snapshot* snap);
// CopyModelState, on the writer thread while the next forward/backward runs: device-to-host copies of the
// weights and AdamW moments into the snapshot's images (allocated on first use, then reused).
// ZeRO-1 at world > 1: the model holds rank `rank`'s shard of the moments, which goes to
// OptimizerShardName(rank, world) instead of optimizer.safetensors.
Status CopyModelState(const Gpt& model, ckpt::Snapshot* snap, int rank = 0, int world = 1);

// "optimizer-00001-of-00002.safetensors"; Parse gives {rank, world}, or nothing for another name.
std::string OptimizerShardName(int rank, int world);
std::optional<std::pair<int, int>> ParseOptimizerShardName(const std::string& name);
// The image of an optimizer shard file of the model's shard of the moments, made on first use (and again if
// the shard changed), then filled from the model.
void FillOptimizerShard(const Gpt& model, std::unique_ptr<ckpt::SafetensorsImage>* image);
// The files of a checkpoint that a model with optimizer shard `mine` reads on resume: all but the optimizer
// shard files that do not overlap `mine` (ZeRO-1: at the same world size only its own).
ckpt::FileFilter ResumeFiles(GradRange trainable, GradRange mine);
// Rank `rank`'s ZeRO-1 shard of the trainable parameters (Gpt::trainable()), in parameter offsets.
GradRange TrainableShard(GradRange trainable, int world, int rank);

struct RestoredTrain {
  TrainProgress progress;
  std::vector<std::string> changes;  // allowed config changes since the checkpoint, "train.steps: 40 -> 80"
};
// Refuses, with one message naming every difference, a checkpoint whose model shape, tokenizer, training
// data, batch geometry (B, T) or seed differ from cfg; otherwise loads weights and moments into the model
// (the moments of its optimizer shard: from optimizer.safetensors, which holds them whole, or from the
// optimizer shard files that cover the shard, whatever world size wrote them: re-sharding copies exactly).
Result<RestoredTrain> RestoreTrainState(const ckpt::LoadedCheckpoint& ck, const TrainConfig& cfg,
                                        const DataIdentity& data, Gpt* model);

// xxh3 of the settings resume depends on (shape, B, T, seed, tokenizer, data), as recorded in manifests.
std::string ResumeFingerprint(const TrainConfig& cfg, const DataIdentity& data);

// Tiers, policies and S3 settings from the ckpt.* keys. The fast tier is always present: emergency
// saves need somewhere to go even when periodic saves are off.
ckpt::ManagerOptions CheckpointManagerOptions(const TrainConfig& cfg);

// Seconds since this process started (from /proc), for "time to the first resumed step".
double ProcessAgeSeconds();

}  // namespace tern
