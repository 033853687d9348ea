// ZeRO-1 checkpoints at world > 1: rank 0 writes the weights, trainer.json and its own optimizer shard; every
// other rank writes its shard file into the same step directory; once every file is durable (an integer
// all-reduce of each rank's size and checksum, which is also the barrier) rank 0 writes the manifest listing
// them all. A rank that fails or dies before the exchange leaves the step without a manifest: not a
// checkpoint (resume skips it, saying so, and takes the previous one).
#include <cstdio>
#include <cstring>

#include <fmt/format.h>

#include "train/trainer.h"

namespace tern {

Status Trainer::JoinSave(std::vector<int>* tiers) {
  if (world() == 1) return Status::Ok();
  if (!sharded_saves()) {
    if (!writer()) tiers->clear();  // rank 0 writes the whole checkpoint
    return Status::Ok();
  }
  int64_t mask = 0;
  if (writer())
    for (int t : *tiers) mask |= int64_t{1} << t;
  TERN_RETURN_IF_ERROR(
      comm_->AllReduceInt(&mask, 1, dist::IntOp::kSum).WithContext("agreeing on a checkpoint (ZeRO-1)"));
  tiers->clear();
  for (int t = 0; t < ckpt_->num_tiers(); t++)
    if (mask & (int64_t{1} << t)) tiers->push_back(t);  // in tier order on every rank, as rank 0 persists
  if (writer() || tiers->empty()) return Status::Ok();
  FillOptimizerShard(*model_, &shard_image_);
  const std::string name = OptimizerShardName(rank(), world());
  for (int t : *tiers) {
    Result<ckpt::ManifestFile> put =
        ckpt::PutCheckpointFile(ckpt_->storage(t), step_, name, shard_image_->bytes());
    if (!put.ok()) std::fprintf(stderr, "tern train: rank %d: %s\n", rank(), put.status().message().c_str());
    Result<std::vector<ckpt::ManifestFile>> files = Status::Internal("no exchange");
    TERN_RETURN_IF_ERROR(ExchangeShardFiles(put, &files));
  }
  tiers->clear();
  return Status::Ok();
}

Status Trainer::ExchangeShardFiles(const Result<ckpt::ManifestFile>& mine,
                                   Result<std::vector<ckpt::ManifestFile>>* files) {
  const int W = world();
  const size_t me = static_cast<size_t>(rank());
  // Per rank: ok, bytes, xxh3 (the 64 bits as they are); the sum over ranks fills every rank's slots.
  std::vector<int64_t> v(3 * static_cast<size_t>(W), 0);
  if (mine.ok()) {
    v[3 * me] = 1;
    v[3 * me + 1] = static_cast<int64_t>(mine->bytes);
    const uint64_t h = mine->xxh3.empty() ? 0 : std::stoull(mine->xxh3, nullptr, 16);
    std::memcpy(&v[3 * me + 2], &h, sizeof h);
  }
  TERN_RETURN_IF_ERROR(comm_->AllReduceInt(v.data(), v.size(), dist::IntOp::kSum)
                           .WithContext("collecting every rank's optimizer shard for the manifest (ZeRO-1)"));
  std::vector<int> failed;
  std::vector<ckpt::ManifestFile> out;
  for (int q = 0; q < W; q++) {
    const size_t i = 3 * static_cast<size_t>(q);
    if (v[i] != 1) {
      failed.push_back(q);
      continue;
    }
    uint64_t h;
    std::memcpy(&h, &v[i + 2], sizeof h);
    if (q > 0)  // rank 0's own files are in its snapshot already
      out.push_back({OptimizerShardName(q, W), static_cast<uint64_t>(v[i + 1]), fmt::format("{:016x}", h)});
  }
  if (!failed.empty()) {
    *files = Status::Unavailable(fmt::format(
        "{} could not write its optimizer shard of step {} (its own message says why): the checkpoint stays "
        "unpublished (no manifest) and the previous one is intact",
        dist::DescribeRanks(failed), step_));
  } else {
    *files = std::move(out);
  }
  return Status::Ok();
}

}  // namespace tern
