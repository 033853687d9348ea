// Prepared data on object storage: `tern prepare --out s3://BUCKET/PREFIX` publishes a prepared directory,
// and a run whose data.dir (or a data.mix entry) is s3:// reads a local mirror of it, so a job relaunched on
// a fresh machine (a spot instance taken back, `tern run` on the next one) finds its tokens as it finds its
// checkpoints. SkyPilot's COPY mode: the whole dataset is fetched before the first step (the loader shuffles
// windows across every shard), in parallel, verified, and kept in a cache that later attempts on the same
// machine reuse without a byte read.
//
// Layout of the cache (DefaultDataCache(), or data.cache_dir):
//   CACHE/s3/BUCKET/PREFIX/<xxh3 of prepare.json>/   a complete, verified copy (renamed into place whole)
//   CACHE/s3/BUCKET/PREFIX/<...>.partial/            a fetch in progress: each file appears whole (temp +
//                                                    rename), so an interrupted fetch resumes where it
//                                                    stopped
//   CACHE/s3/BUCKET/PREFIX/.lock                     flock: ranks of one machine fetch once
// prepare.json names a dataset's content: a re-prepared dataset (another prepare.json) gets its own copy.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "ckpt/storage.h"
#include "core/status.h"

namespace tern {

// True for "s3://..." (the forms ckpt::OpenStorage reads as object storage).
bool IsRemoteData(const std::string& dir);

// $TERN_DATA_CACHE, else $XDG_CACHE_HOME/tern/data, else $HOME/.cache/tern/data, else /tmp/tern-data-cache.
std::string DefaultDataCache();

struct DataMirrorOptions {
  std::string cache_dir;  // empty = DefaultDataCache()
  ckpt::S3Options s3;
  int parallel = 4;         // objects fetched at once (each held in memory whole while it is written)
  FILE* progress = stderr;  // a progress bar and one summary line; nullptr = quiet
};

struct DataMirror {
  std::string local_dir;  // the verified copy, a directory the loader reads like any `tern prepare` output
  int files = 0;          // the dataset's files (prepare.json included)
  int fetched = 0;        // of them read from the store this time (0 = the copy was already here)
  uint64_t bytes = 0, fetched_bytes = 0;
  double seconds = 0;  // listing, fetching and verifying
};

// Makes a verified local copy of the prepared dataset at `uri` (or finds it already made) and returns where
// it is. Every shard is checked against the hash in its header and the splits against prepare.json (the same
// checks as `tern prepare --verify`) before the copy is published; a damaged object is an error naming it,
// and nothing of it is kept. A copy already in the cache is trusted (it was verified when it was made).
Result<DataMirror> MirrorPreparedData(const std::string& uri, const DataMirrorOptions& options);

// A run's settings for its s3:// data: data.cache_dir, and the store's endpoint and region (ckpt.s3_*: data
// and checkpoints usually share a store).
struct TrainConfig;
DataMirrorOptions DataMirrorOptionsFor(const TrainConfig& cfg, FILE* progress = stderr);

// `dir` itself when it is local, else MirrorPreparedData's copy: for the readers of a dataset other than the
// trainer (tern eval, the pipeline's evaluation).
Result<std::string> LocalDataDir(const std::string& dir, const DataMirrorOptions& options);

// What prepare.json records, read from the store alone (one small GET, nothing fetched): for `tern plan
// --config` and `tern bench --config`, which need the model's shape and the data's size, not the data.
struct RemoteDataInfo {
  int vocab_size = 0;
  uint64_t shard_bytes = 0;  // the token shards of both splits (what a fetch reads, but for the tokenizer)
};
Result<RemoteDataInfo> ReadRemoteDataInfo(const std::string& uri, const ckpt::S3Options& s3);

struct DataPublish {
  int files = 0;
  uint64_t bytes = 0;
  int removed = 0;  // objects of a replaced dataset left under the prefix, deleted after the new prepare.json
  double seconds = 0;
};

// Uploads the prepared directory `local_dir` to `uri` (`parallel` objects at a time): every file but
// prepare.json first, then prepare.json,
// which marks the dataset complete (a reader never sees a prepare.json whose shards are not all there). A
// prefix that already holds a different dataset is refused unless `force`; the same dataset again uploads
// nothing.
Result<DataPublish> PublishPreparedData(const std::string& local_dir, const std::string& uri, bool force,
                                        const ckpt::S3Options& s3, FILE* progress = stderr, int parallel = 4);

// After a publish: moves the prepared directory `local_dir` (on the cache's filesystem) into the cache as
// the copy of `uri`, so a run on this machine finds it without a fetch. Nothing to do when one is there.
Status AdoptIntoDataCache(const std::string& local_dir, const std::string& uri, const std::string& cache_dir);

}  // namespace tern
