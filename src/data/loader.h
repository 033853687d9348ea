// Batches for training and evaluation, read from memory-mapped token shards by a background thread.
//
// A sample is a window of T+1 consecutive tokens inside one shard (windows start every T tokens and never
// cross shards): inputs are its first T tokens, targets the last T (the next token at each position).
// An epoch visits every window once, in order (validation) or in a per-epoch permutation (training) that
// depends only on (seed, epoch), computed from std::mt19937_64's raw outputs so it is identical on every
// platform and standard library. A batch takes the next B windows; epochs roll over forever, so a batch
// may straddle two epochs.
//
// A mixture (several prepared datasets, each with a share of the windows: `data.mix`) interleaves the
// sources' own streams, each shuffled and rolling over on its own, by a fixed pattern of kMixPeriod slots
// in which source s has round(share_s * kMixPeriod) slots spread as evenly as they go (the largest deficit
// first). Every slot of the mixed stream maps, in O(1), to a window of its source, so positions, restores
// and data-parallel slices work on the mixed stream as on a single dataset: its "epoch" is one period.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "data/shard.h"

namespace tern {

struct Batch {
  std::vector<int32_t> inputs;   // (B, T) row-major
  std::vector<int32_t> targets;  // (B, T): targets[b][t] = token after inputs[b][t]
  int B = 0, T = 0;
};

// Where the loader stands: `index` is the position, within epoch `epoch`'s window order, of the first window
// of the next batch Next() will return (not of what the prefetcher has read ahead). With a DataSlice it is a
// position of the global stream: the start of the group in progress (of the next group once this rank has
// read its last batch of the group), the same on every rank at an optimizer step's boundary.
struct LoaderPosition {
  uint64_t epoch = 0, index = 0;
  bool operator==(const LoaderPosition&) const = default;
};

// Data parallel: which batches of the global stream this rank reads. The global stream is the one a single
// process reads (batches of B windows in the order above); it is cut into groups of world * run batches, and
// rank r takes batches [r * run, (r + 1) * run) of every group. A trainer with W ranks and A micro-batches
// per optimizer step uses run = A / W: each step's group is exactly the step's A micro-batches, and the ranks
// together see the same data, in the same order, as one process.
struct DataSlice {
  int rank = 0, world = 1, run = 1;
  bool whole() const { return world == 1; }
};

// A shard's loss mask, beside it (`tern prepare --chat`): "train_000.bin" -> "train_000.mask.bin", a shard of
// the same length whose tokens are 1 where the model learns the token (an assistant's reply) and 0 where it
// only reads it. The loader turns the targets of masked tokens into -1, which the loss ignores.
std::string MaskPathFor(const std::string& shard_path);

// Targets the loss learns: those >= 0 (all of them without loss masks).
inline int64_t LearnedTargets(const std::vector<int32_t>& targets) {
  int64_t n = 0;
  for (int32_t t : targets) n += t >= 0;
  return n;
}

// Sorted DIR/<split>_<digits>.bin (e.g. split "train" -> train_000.bin, train_001.bin, ...). NotFound when
// none.
Result<std::vector<std::string>> FindShards(const std::string& dir, const std::string& split);

// One dataset of a mixture: its shards and its share of the windows (the shares need not sum to 1; they are
// normalised).
struct MixSource {
  std::vector<std::string> shards;
  double weight = 1;
};

// Slots in one period of a mixture's pattern: shares are kept to 1/kMixPeriod.
inline constexpr uint32_t kMixPeriod = 1000;

class DataLoader {
 public:
  // Opens every shard (all must share one vocab size) and starts the prefetch thread, which keeps up to
  // prefetch_depth batches ready. InvalidArgument when the shards hold no window of T+1 tokens.
  static Result<std::unique_ptr<DataLoader>> Open(const std::vector<std::string>& shard_paths, int B, int T,
                                                  uint64_t seed, bool shuffle, int prefetch_depth = 4,
                                                  DataSlice slice = {});
  // A mixture of datasets (one source = Open above, bit for bit). Source 0 keeps the single dataset's order;
  // the others are shuffled with their own seeds. InvalidArgument when a share rounds to no slot of the
  // period, or any source holds no window.
  static Result<std::unique_ptr<DataLoader>> OpenMix(const std::vector<MixSource>& sources, int B, int T,
                                                     uint64_t seed, bool shuffle, int prefetch_depth = 4,
                                                     DataSlice slice = {});
  ~DataLoader();  // stops and joins the prefetch thread
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch. Blocks while the queue is empty; that time is added to the wait counter. The vectors
  // that *out held before are recycled for a later batch (no allocation per step in steady state).
  Status Next(Batch* out);
  // Seconds Next() spent waiting since the last call; resets the counter.
  double TakeWaitSeconds();

  LoaderPosition position() const;
  // Continues from `p` (as returned by position(), possibly by another loader over the same shards, seed and
  // shapes, and with a slice: by a loader of another world size at a group boundary): the batches that follow
  // are identical to those that followed when position() returned p.
  // InvalidArgument when p.index is outside the epoch (the shards or T changed since p was saved).
  Status Restore(const LoaderPosition& p);
  Status Reset() { return Restore({0, 0}); }

  // Windows of one epoch (of a mixture: kMixPeriod, one period of the pattern) and tokens of all sources.
  uint64_t windows_per_epoch() const { return total_windows_; }
  uint64_t tokens() const { return total_tokens_; }
  // The sources (one without a mixture): windows, tokens and slots per period of each.
  size_t num_sources() const { return sources_.size(); }
  uint64_t source_windows(size_t s) const { return sources_[s].windows; }
  uint64_t source_tokens(size_t s) const { return sources_[s].tokens; }
  double source_share(size_t s) const {
    return mixed() ? static_cast<double>(sources_[s].slots) / kMixPeriod : 1.0;
  }
  uint32_t vocab_size() const { return vocab_size_; }
  // What it reads, by content (data/shard.h ShardsFingerprint, from the shard headers: no data is read): of
  // one dataset's train shards, prepare.json's content.train; of a mixture, the sources' joined by "+"; ""
  // when a shard records none (written by an older tern prepare).
  std::string content_fingerprint() const;
  // Whether any shard has a loss mask (MaskPathFor): then some targets are -1.
  bool has_masks() const { return has_masks_; }
  const DataSlice& slice() const { return slice_; }
  int B() const { return B_; }
  int T() const { return T_; }

 private:
  struct Prefetched {
    Batch batch;
    LoaderPosition end;  // position after this batch
  };

  struct Source {
    std::vector<ShardReader> shards;
    std::vector<std::optional<ShardReader>> masks;  // each shard's loss mask, when it has one
    std::vector<uint64_t> first_window;  // first window index of each shard, plus the total at the end
    uint64_t windows = 0, tokens = 0;
    uint32_t slots = 0;  // mixture: slots per period
  };
  // The producer's cache of each source's window order for one of its epochs.
  struct Orders {
    std::vector<uint64_t> epoch;
    std::vector<std::vector<uint32_t>> order;
  };

  DataLoader() = default;
  bool mixed() const { return sources_.size() > 1; }
  Status AssignSlots(const std::vector<double>& weights);
  void BuildPattern();
  void Start(LoaderPosition from);
  void Stop();
  void ProducerLoop(LoaderPosition from);
  void Skip(LoaderPosition* pos, uint64_t windows) const;  // moves pos on by that many windows
  void BuildOrder(size_t source, uint64_t epoch, std::vector<uint32_t>* order) const;
  Status FillBatch(LoaderPosition* pos, Orders* orders, Batch* b, std::vector<int32_t>* window) const;

  std::vector<Source> sources_;
  std::vector<uint16_t> pattern_;  // mixture: the source of each slot of a period
  std::vector<uint32_t> before_;   // mixture: [s * kMixPeriod + i] = slots of source s in pattern_[0, i)
  uint64_t total_windows_ = 0, total_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  bool has_masks_ = false;
  int B_ = 0, T_ = 0;
  uint64_t seed_ = 0;
  bool shuffle_ = false;
  size_t depth_ = 4;
  DataSlice slice_;

  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Prefetched> queue_;
  std::vector<Batch> spare_;  // recycled batch buffers
  bool stop_ = false;
  Status error_;  // the producer's failure (a shard that went bad): Next() returns it after the queue
  LoaderPosition consumer_pos_;
  double wait_seconds_ = 0;
  // TEST HOOK: $TERN_TEST_DATA_DELAY_MS (read at Create) makes every Next() sleep that long, counted as data
  // wait: a slow loader for the diagnosis tests (src/report/diagnose_e2e_test.cpp). 0 = off, as in
  // production.
  int test_delay_ms_ = 0;
  std::thread thread_;
};

}  // namespace tern
