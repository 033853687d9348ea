#include "data/loader.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>
#include <thread>

namespace tern {

namespace fs = std::filesystem;

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, n) from raw 64-bit outputs (Lemire's multiply-and-reject). Written out because
// std::uniform_int_distribution's algorithm differs between standard libraries, and the order must not.
uint64_t Bounded(std::mt19937_64& rng, uint64_t n) {
  unsigned __int128 m = static_cast<unsigned __int128>(rng()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(rng()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

std::string MaskPathFor(const std::string& shard_path) {
  const std::string stem =
      shard_path.ends_with(".bin") ? shard_path.substr(0, shard_path.size() - 4) : shard_path;
  return stem + ".mask.bin";
}

Result<std::vector<std::string>> FindShards(const std::string& dir, const std::string& split) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    const bool relative = fs::path(dir).is_relative();
    return Status::NotFound(fmt::format(
        "data directory {} does not exist{}; create it with tern prepare --out {}", dir,
        relative ? fmt::format(" (relative to the current directory, {})", fs::current_path(ec).string())
                 : "",
        dir));
  }
  std::vector<std::string> found;
  const std::string prefix = split + "_";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name.size() <= prefix.size() + 4 || !name.starts_with(prefix) ||
        !name.ends_with(".bin")) {
      continue;
    }
    // Only SPLIT_<digits>.bin: other .bin files beside the shards are not ours to read.
    std::string_view digits(name.data() + prefix.size(), name.size() - prefix.size() - 4);
    if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      found.push_back(e.path().string());
    }
  }
  if (ec) return Status::IoError(fmt::format("cannot list {}: {}", dir, ec.message()));
  if (found.empty()) {
    return Status::NotFound(
        fmt::format("no {}_*.bin shards in {}; tern prepare --out {} writes them", split, dir, dir));
  }
  // Shorter names first, so that train_1000.bin follows train_999.bin.
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return found;
}

std::string DataLoader::content_fingerprint() const {
  std::string out;
  for (const Source& src : sources_) {
    std::vector<uint64_t> shards, masks;
    for (const auto& sh : src.shards) shards.push_back(sh.content_xxh3());
    for (const auto& m : src.masks) masks.push_back(m ? m->content_xxh3() : 0);
    const std::string fp = ShardsFingerprint(shards, masks);
    if (fp.empty()) return "";
    out += (out.empty() ? "" : "+") + fp;
  }
  return out;
}

Result<std::unique_ptr<DataLoader>> DataLoader::Open(const std::vector<std::string>& shard_paths, int B,
                                                     int T, uint64_t seed, bool shuffle, int prefetch_depth,
                                                     DataSlice slice) {
  if (shard_paths.empty()) return Status::InvalidArgument("DataLoader needs at least one shard");
  return OpenMix({MixSource{shard_paths, 1.0}}, B, T, seed, shuffle, prefetch_depth, slice);
}

Result<std::unique_ptr<DataLoader>> DataLoader::OpenMix(const std::vector<MixSource>& sources, int B, int T,
                                                        uint64_t seed, bool shuffle, int prefetch_depth,
                                                        DataSlice slice) {
  if (slice.world < 1 || slice.rank < 0 || slice.rank >= slice.world || slice.run < 1) {
    return Status::InvalidArgument(fmt::format("data slice rank {} of world {} (run {}) is not valid",
                                               slice.rank, slice.world, slice.run));
  }
  if (B <= 0 || T <= 0)
    return Status::InvalidArgument(fmt::format("batch B={} and sequence T={} must be > 0", B, T));
  if (prefetch_depth <= 0) return Status::InvalidArgument("prefetch_depth must be >= 1");
  if (sources.empty()) return Status::InvalidArgument("DataLoader needs at least one source");
  if (sources.size() > 256) return Status::InvalidArgument("a mixture takes at most 256 datasets");
  std::unique_ptr<DataLoader> dl(new DataLoader());
  dl->B_ = B;
  dl->T_ = T;
  dl->seed_ = seed;
  dl->shuffle_ = shuffle;
  dl->depth_ = static_cast<size_t>(prefetch_depth);
  if (const char* d = std::getenv("TERN_TEST_DATA_DELAY_MS"); d && *d)
    dl->test_delay_ms_ = std::atoi(d);  // test hook
  dl->slice_ = slice;
  std::string first_path;
  for (const MixSource& ms : sources) {
    if (ms.shards.empty()) return Status::InvalidArgument("DataLoader needs at least one shard");
    Source src;
    uint64_t largest = 0;
    for (const auto& path : ms.shards) {
      TERN_ASSIGN_OR_RETURN(ShardReader r, ShardReader::Open(path));
      if (first_path.empty()) {
        first_path = path;
        dl->vocab_size_ = r.vocab_size();
      }
      if (r.vocab_size() != dl->vocab_size_) {
        return Status::InvalidArgument(fmt::format(
            "shard {} has vocab size {} but {} has {}: shards from different tokenizers cannot be mixed",
            path, r.vocab_size(), first_path, dl->vocab_size_));
      }
      src.first_window.push_back(src.windows);
      // Windows of T+1 tokens start at 0, T, 2T, ... and must end inside the shard.
      const uint64_t n = r.size();
      std::optional<ShardReader> mask;
      std::error_code ec;
      if (const std::string mp = MaskPathFor(path); fs::exists(mp, ec)) {
        TERN_ASSIGN_OR_RETURN(ShardReader m, ShardReader::Open(mp));
        if (m.size() != n || m.vocab_size() != 2)
          return Status::Corruption(fmt::format(
              "{} is not the loss mask of {} ({} values of {} kinds for {} tokens): prepare the data again "
              "with tern prepare --chat",
              mp, path, m.size(), m.vocab_size(), n));
        mask = std::move(m);
        dl->has_masks_ = true;
      }
      src.masks.push_back(std::move(mask));
      src.windows += n > static_cast<uint64_t>(T) ? (n - 1) / T : 0;
      src.tokens += n;
      largest = std::max(largest, n);
      src.shards.push_back(std::move(r));
    }
    src.first_window.push_back(src.windows);
    if (src.windows == 0) {
      return Status::InvalidArgument(fmt::format(
          "the {} shard(s) from {} hold {} tokens (largest {}), but one sample needs T+1 = {} consecutive "
          "tokens in one shard; use a smaller sequence length or more text",
          ms.shards.size(), ms.shards.front(), src.tokens, largest, static_cast<uint64_t>(T) + 1));
    }
    if (src.windows > std::numeric_limits<uint32_t>::max()) {
      return Status::InvalidArgument(
          fmt::format("{} windows per epoch exceed the loader's 2^32 limit; use a larger T", src.windows));
    }
    dl->total_tokens_ += src.tokens;
    dl->sources_.push_back(std::move(src));
  }
  dl->total_windows_ = dl->sources_[0].windows;
  if (dl->mixed()) {
    std::vector<double> w;
    for (const MixSource& ms : sources) w.push_back(ms.weight);
    TERN_RETURN_IF_ERROR(dl->AssignSlots(w));
    dl->BuildPattern();
  }
  dl->Start({0, 0});
  return dl;
}

// Slots per period in proportion to the weights, by largest remainder (ties to the earlier source).
Status DataLoader::AssignSlots(const std::vector<double>& weights) {
  double sum = 0;
  for (double x : weights) {
    if (!(x > 0) || !std::isfinite(x))
      return Status::InvalidArgument(fmt::format("a mixture weight must be a positive number, not {}", x));
    sum += x;
  }
  std::vector<std::pair<double, size_t>> rest;
  uint32_t given = 0;
  for (size_t s = 0; s < sources_.size(); ++s) {
    const double exact = weights[s] / sum * kMixPeriod;
    sources_[s].slots = static_cast<uint32_t>(exact);
    given += sources_[s].slots;
    rest.push_back({exact - sources_[s].slots, s});
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < kMixPeriod; ++k, ++given) sources_[rest[k].second].slots++;
  for (size_t s = 0; s < sources_.size(); ++s) {
    if (sources_[s].slots == 0)
      return Status::InvalidArgument(fmt::format(
          "mixture source {} has a share of {:.5f}, below the mixture's step of 1/{}: raise its weight or "
          "leave it out",
          s, weights[s] / sum, kMixPeriod));
  }
  return Status::Ok();
}

// Slot i goes to the source furthest behind its share of the first i + 1 slots (integers: deficit scaled
// by kMixPeriod; ties to the earlier source), so every source's slots are spread through the period.
void DataLoader::BuildPattern() {
  const size_t S = sources_.size();
  total_windows_ = kMixPeriod;
  pattern_.assign(kMixPeriod, 0);
  before_.assign(S * kMixPeriod, 0);
  std::vector<uint32_t> taken(S, 0);
  for (uint32_t i = 0; i < kMixPeriod; ++i) {
    size_t best = 0;
    int64_t best_deficit = std::numeric_limits<int64_t>::min();
    for (size_t s = 0; s < S; ++s) {
      before_[s * kMixPeriod + i] = taken[s];
      const int64_t deficit =
          static_cast<int64_t>(i + 1) * sources_[s].slots - static_cast<int64_t>(taken[s]) * kMixPeriod;
      if (taken[s] < sources_[s].slots && deficit > best_deficit) {
        best = s;
        best_deficit = deficit;
      }
    }
    pattern_[i] = static_cast<uint16_t>(best);
    taken[best]++;
  }
}

DataLoader::~DataLoader() {
  Stop();
}

void DataLoader::Start(LoaderPosition from) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = false;
    error_ = Status::Ok();
  }
  thread_ = std::thread(&DataLoader::ProducerLoop, this, from);
}

void DataLoader::Stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  not_full_.notify_all();
  not_empty_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DataLoader::BuildOrder(size_t source, uint64_t epoch, std::vector<uint32_t>* order) const {
  const uint64_t n = sources_[source].windows;
  order->resize(n);
  std::iota(order->begin(), order->end(), 0u);
  // Fisher-Yates, seeded by (seed, source, epoch) only: any epoch's order can be rebuilt from scratch on
  // Restore. Source 0 (the only one without a mixture) keeps the single dataset's seeding.
  uint64_t key = SplitMix64(seed_ ^ SplitMix64(epoch));
  if (source > 0) key = SplitMix64(key ^ SplitMix64(0x6D6978ull + source));  // "mix"
  std::mt19937_64 rng(key);
  for (uint64_t i = n - 1; i > 0; --i) std::swap((*order)[i], (*order)[Bounded(rng, i + 1)]);
}

Status DataLoader::FillBatch(LoaderPosition* pos, Orders* orders, Batch* b,
                             std::vector<int32_t>* window) const {
  const size_t T = static_cast<size_t>(T_);
  b->B = B_;
  b->T = T_;
  b->inputs.resize(static_cast<size_t>(B_) * T);
  b->targets.resize(static_cast<size_t>(B_) * T);
  for (int row = 0; row < B_; ++row) {
    // The source of this slot and the place in the source's own stream: (epoch, index) of that stream.
    size_t src = 0;
    uint64_t epoch = pos->epoch, w = pos->index;
    if (mixed()) {
      src = pattern_[pos->index];
      const Source& s = sources_[src];
      const uint64_t j = pos->epoch * s.slots + before_[src * kMixPeriod + pos->index];
      epoch = j / s.windows;
      w = j % s.windows;
    }
    if (shuffle_) {
      if (orders->epoch[src] != epoch) {
        BuildOrder(src, epoch, &orders->order[src]);
        orders->epoch[src] = epoch;
      }
      w = orders->order[src][w];
    }
    const Source& s = sources_[src];
    size_t sh =
        std::upper_bound(s.first_window.begin(), s.first_window.end(), w) - s.first_window.begin() - 1;
    // Windows are in range by construction; what can fail is the file under the mapping.
    const uint64_t at = (w - s.first_window[sh]) * T;
    TERN_RETURN_IF_ERROR(s.shards[sh].Read(at, T + 1, window->data()));
    std::copy(window->begin(), window->begin() + T, b->inputs.begin() + row * T);
    std::copy(window->begin() + 1, window->end(), b->targets.begin() + row * T);
    if (s.masks[sh]) {  // targets the model only reads are not learned
      TERN_RETURN_IF_ERROR(s.masks[sh]->Read(at, T + 1, window->data()));
      for (size_t t = 0; t < T; ++t)
        if ((*window)[t + 1] == 0) b->targets[row * T + t] = -1;
    }
    if (++pos->index == total_windows_) *pos = {pos->epoch + 1, 0};
  }
  return Status::Ok();
}

void DataLoader::Skip(LoaderPosition* pos, uint64_t windows) const {
  const uint64_t index = pos->index + windows;
  *pos = {pos->epoch + index / total_windows_, index % total_windows_};
}

// `pos` is the global stream's position; with a slice, the start of the group in progress (group_pos) is what
// each batch reports as its end until this rank's last batch of the group, which reports the next group.
void DataLoader::ProducerLoop(LoaderPosition pos) {
  Orders orders;
  orders.epoch.assign(sources_.size(), std::numeric_limits<uint64_t>::max());
  orders.order.resize(sources_.size());
  std::vector<int32_t> window(static_cast<size_t>(T_) + 1);
  const uint64_t run_windows = static_cast<uint64_t>(slice_.run) * B_;
  LoaderPosition group_pos = pos;
  int in_group = 0;  // batches of this group already read by this rank
  while (true) {
    Batch b;
    {
      std::unique_lock<std::mutex> lk(mu_);
      not_full_.wait(lk, [&] { return stop_ || queue_.size() < depth_; });
      if (stop_) return;
      if (!spare_.empty()) {
        b = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    // Outside the lock: the consumer keeps going.
    if (!slice_.whole() && in_group == 0) Skip(&pos, slice_.rank * run_windows);  // the ranks before this one
    if (Status st = FillBatch(&pos, &orders, &b, &window); !st.ok()) {
      std::lock_guard<std::mutex> lk(mu_);
      error_ = st;
      not_empty_.notify_all();
      return;
    }
    LoaderPosition end = pos;
    if (!slice_.whole()) {
      if (++in_group == slice_.run) {  // this rank's part of the group is read: on to the next group
        Skip(&pos, (slice_.world - 1 - slice_.rank) * run_windows);
        group_pos = end = pos;
        in_group = 0;
      } else {
        end = group_pos;
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) return;
      queue_.push_back({std::move(b), end});
    }
    not_empty_.notify_one();
  }
}

Status DataLoader::Next(Batch* out) {
  auto t0 = std::chrono::steady_clock::now();
  if (test_delay_ms_ > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(test_delay_ms_));  // test hook
  std::unique_lock<std::mutex> lk(mu_);
  not_empty_.wait(lk, [&] { return stop_ || !queue_.empty() || !error_.ok(); });
  if (queue_.empty() && !error_.ok()) return error_;
  if (queue_.empty()) return Status::Unavailable("the data loader is shutting down");
  Prefetched p = std::move(queue_.front());
  queue_.pop_front();
  consumer_pos_ = p.end;
  if (out->inputs.capacity() > 0 && spare_.size() <= depth_) spare_.push_back(std::move(*out));
  *out = std::move(p.batch);
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lk.unlock();
  not_full_.notify_one();
  return Status::Ok();
}

double DataLoader::TakeWaitSeconds() {
  std::lock_guard<std::mutex> lk(mu_);
  double w = wait_seconds_;
  wait_seconds_ = 0;
  return w;
}

LoaderPosition DataLoader::position() const {
  std::lock_guard<std::mutex> lk(mu_);
  return consumer_pos_;
}

Status DataLoader::Restore(const LoaderPosition& p) {
  if (p.index >= total_windows_) {
    return Status::InvalidArgument(
        fmt::format("loader position {}:{} is outside the {} windows of an epoch: were the shards or T "
                    "changed since it was saved?",
                    p.epoch, p.index, total_windows_));
  }
  Stop();
  {
    std::lock_guard<std::mutex> lk(mu_);
    while (!queue_.empty()) {  // keep the read-ahead buffers for reuse
      if (spare_.size() <= depth_) spare_.push_back(std::move(queue_.front().batch));
      queue_.pop_front();
    }
    consumer_pos_ = p;
  }
  Start(p);
  return Status::Ok();
}

}  // namespace tern
