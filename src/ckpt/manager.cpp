#include "ckpt/manager.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/ranges.h>

namespace tern::ckpt {

namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string Unfinished(Storage& storage, const CheckpointRef& ref) {
  return fmt::format(
      "{} has no manifest.json: its save never finished (the process, or one rank of a data-parallel job, "
      "stopped before every file was written); not a checkpoint, skipped",
      JoinKey(storage.uri(), ref.dir));
}

// Newest valid checkpoint in one storage; damaged ones are described in *skipped.
Result<LoadedCheckpoint> NewestIn(Storage& storage, std::vector<std::string>* skipped, const FileFilter& want,
                                  std::vector<std::string>* unfinished) {
  TERN_ASSIGN_OR_RETURN(auto refs, ListCheckpoints(storage));
  for (auto it = refs.rbegin(); it != refs.rend(); ++it) {
    if (!it->has_manifest) {  // debris of an unfinished save: not a checkpoint
      if (unfinished) unfinished->push_back(Unfinished(storage, *it));
      continue;
    }
    auto loaded = LoadCheckpoint(storage, it->dir, want);
    if (loaded.ok()) return loaded;
    if (skipped) skipped->push_back(loaded.status().message());
  }
  return Status::NotFound(fmt::format("no valid checkpoint in {}", storage.uri()));
}

}  // namespace

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(ManagerOptions options) {
  std::unique_ptr<CheckpointManager> m(new CheckpointManager());
  if (!options.open_storage) {
    S3Options s3 = options.s3;
    options.open_storage = [s3](const std::string& uri) { return OpenStorage(uri, s3); };
  }
  m->options_ = options;
  for (const auto& t : options.tiers) {
    Tier tier;
    tier.options = t;
    TERN_ASSIGN_OR_RETURN(tier.storage, options.open_storage(t.uri));
    if (t.keep.keep_best > 0) {
      // The best already kept (by an earlier run of this job), so a resumed run keeps ranking against them.
      auto refs = ListCheckpoints(*tier.storage);
      if (refs.ok()) {
        for (const auto& r : *refs) {
          if (!r.has_manifest) continue;
          auto text = tier.storage->Get(JoinKey(r.dir, kManifestName));
          auto man = text.ok() ? Manifest::Parse(*text) : Result<Manifest>(text.status());
          if (man.ok() && man->val_loss) tier.best.emplace_back(r.step, *man->val_loss);
        }
      }
    }
    m->tiers_.push_back(std::move(tier));
  }
  if (options.async) m->writer_ = std::thread([p = m.get()] { p->WriterLoop(); });
  return m;
}

CheckpointManager::~CheckpointManager() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !job_.has_value(); });
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

int CheckpointManager::FindTier(const std::string& name) const {
  for (size_t i = 0; i < tiers_.size(); i++)
    if (tiers_[i].options.name == name) return static_cast<int>(i);
  return -1;
}

bool CheckpointManager::busy() {
  std::lock_guard<std::mutex> lock(mu_);
  return job_.has_value();
}

void CheckpointManager::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !job_.has_value(); });
}

std::vector<SaveEvent> CheckpointManager::TakeEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(events_, {});
}

Status CheckpointManager::Save(int64_t step, const std::vector<int>& tiers, const std::string& kind,
                               std::optional<double> val_loss, const FillFn& capture, FillFn copy,
                               bool sync) {
  if (tiers.empty()) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (job_.has_value() && options_.skip_when_busy && !sync) {
      for (int t : tiers) {
        SaveEvent e;
        e.step = step;
        e.tier = tiers_[t].options.name;
        e.kind = kind;
        e.skipped = true;
        events_.push_back(e);
      }
      return Status::Ok();
    }
    cv_.wait(lock, [&] { return !job_.has_value(); });  // the snapshot buffer is ours again
  }
  const double wait_ms = MsSince(t0);
  snapshot_.step = step;
  snapshot_.manifest = Manifest();
  TERN_RETURN_IF_ERROR(capture(snapshot_).WithContext(fmt::format("snapshot of step {}", step)));
  snapshot_.manifest.kind = kind;
  snapshot_.manifest.val_loss = val_loss;
  for (int t : tiers) {
    auto& best = tiers_[t].best;
    if (tiers_[t].options.keep.keep_best <= 0 || !val_loss) continue;
    best.emplace_back(step, *val_loss);
    std::sort(best.begin(), best.end(), [](auto& a, auto& b) { return a.second < b.second; });
    if (best.size() > static_cast<size_t>(tiers_[t].options.keep.keep_best))
      best.resize(tiers_[t].options.keep.keep_best);
  }
  Job job;
  job.tiers = tiers;
  job.kind = kind;
  job.copy = std::move(copy);
  job.wait_ms = wait_ms;
  if (sync || !options_.async) {
    Copy(&job);
    job.stall_ms = MsSince(t0);
    std::vector<SaveEvent> events = Persist(job);
    std::lock_guard<std::mutex> lock(mu_);
    events_.insert(events_.end(), events.begin(), events.end());
    return Status::Ok();
  }
  job.stall_ms = MsSince(t0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
  }
  cv_.notify_all();
  return Status::Ok();
}

void CheckpointManager::Copy(Job* job) {
  const auto t0 = std::chrono::steady_clock::now();
  if (job->copy)
    job->copy_status = job->copy(snapshot_).WithContext(fmt::format("snapshot of step {}", snapshot_.step));
  job->copy_ms = MsSince(t0);
}

void CheckpointManager::WaitForSnapshot() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!job_.has_value() || job_->copied) return;
  cv_.wait(lock, [&] { return !job_.has_value() || job_->copied; });
  if (job_.has_value()) job_->fence_ms += MsSince(t0);  // the training stall this save caused
}

std::vector<SaveEvent> CheckpointManager::Persist(const Job& job) {
  std::vector<SaveEvent> events;
  for (int t : job.tiers) {
    Tier& tier = tiers_[t];
    SaveEvent e;
    e.step = snapshot_.step;
    e.tier = tier.options.name;
    e.kind = job.kind;
    e.stall_ms = job.stall_ms + job.fence_ms;
    e.wait_ms = job.wait_ms;
    e.copy_ms = job.copy_ms;
    if (!job.copy_status.ok()) {
      // The other ranks wait in the exchange for this tier: tell them the save failed.
      if (snapshot_.gather_files) (void)snapshot_.gather_files(*tier.storage, job.copy_status);
      e.status = job.copy_status;
      events.push_back(std::move(e));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto stats = PersistSnapshot(snapshot_, *tier.storage);
    e.persist_ms = MsSince(t0);
    e.location = JoinKey(tier.storage->uri(), StepDirName(snapshot_.step));
    if (stats.ok()) {
      e.bytes = stats->bytes;
      // Retention runs here, on the writer: it can never race this tier's save, and it only starts once the
      // new checkpoint is published, so the newest valid one is never the one deleted.
      auto gc = CollectGarbage(*tier.storage, tier.options.keep, /*no_save_in_flight=*/true);
      if (gc.ok())
        e.removed = gc->removed;
      else
        e.status = gc.status().WithContext("retention");
    } else {
      e.status = stats.status();
    }
    events.push_back(std::move(e));
  }
  return events;
}

void CheckpointManager::WriterLoop() {
  // The writer yields to training: where training uses every core (the CPU engine), the step beside a save
  // lost ~120 ms of ~250 to the copy and persist at equal priority (demo config, 2 cores); at nice 10 it
  // loses ~35 ms and persisting takes ~1 s instead of ~0.2 s, in the gaps (CFS still gives it a tenth of a
  // busy core, so it always finishes). On a GPU machine the host cores are mostly idle: no change. A save
  // that must finish (a preemption notice, the run's end) waits while training is stopped, so it gets the
  // cores.
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_.has_value(); });
      if (!job_.has_value()) return;  // stop_ and nothing left
      job = *job_;
    }
    Copy(&job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_->copied = true;  // the training thread may update the weights again
    }
    cv_.notify_all();
    std::vector<SaveEvent> events = Persist(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& e : events) e.stall_ms += job_->fence_ms;  // recorded by WaitForSnapshot meanwhile
      events_.insert(events_.end(), events.begin(), events.end());
      job_.reset();
    }
    cv_.notify_all();
  }
}

bool CheckpointManager::WouldKeepBest(int tier, double val_loss) {
  const auto& t = tiers_[tier];
  const size_t k = static_cast<size_t>(std::max(0, t.options.keep.keep_best));
  size_t better = 0;
  for (const auto& [step, loss] : t.best)
    if (loss <= val_loss) better++;
  return better < k;
}

int64_t CheckpointManager::NewestStep(int tier) {
  auto refs = ListCheckpoints(*tiers_[tier].storage);
  if (!refs.ok()) return -1;
  for (auto it = refs->rbegin(); it != refs->rend(); ++it)
    if (it->has_manifest) return it->step;
  return -1;
}

Result<LoadedCheckpoint> CheckpointManager::LoadNewestValid(std::vector<std::string>* skipped,
                                                            const FileFilter& want,
                                                            std::vector<std::string>* unfinished) {
  struct Candidate {
    int tier;
    CheckpointRef ref;
  };
  std::vector<Candidate> all, debris;
  std::vector<std::string> where;
  for (int t = 0; t < num_tiers(); t++) {
    where.push_back(tiers_[t].storage->uri());
    auto refs = ListCheckpoints(*tiers_[t].storage);
    if (!refs.ok()) {
      if (skipped)
        skipped->push_back(
            fmt::format("tier {} unreadable: {}", tiers_[t].options.name, refs.status().message()));
      continue;
    }
    for (const auto& r : *refs)
      if (r.has_manifest) {
        all.push_back({t, r});
      } else {
        debris.push_back({t, r});
      }
  }
  // Unfinished saves newer than the checkpoint taken (-1: none found) are reported.
  const auto report_unfinished = [&](int64_t taken) {
    if (!unfinished) return;
    for (const auto& d : debris)
      if (d.ref.step > taken) unfinished->push_back(Unfinished(*tiers_[d.tier].storage, d.ref));
  };
  // Newest first; on a tie the earlier tier (fast before durable) as it is quicker to read.
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.ref.step != b.ref.step ? a.ref.step > b.ref.step : a.tier < b.tier;
  });
  for (const auto& c : all) {
    auto loaded = LoadCheckpoint(*tiers_[c.tier].storage, c.ref.dir, want);
    if (loaded.ok()) {
      report_unfinished(c.ref.step);
      return loaded;
    }
    if (skipped) skipped->push_back(loaded.status().message());
  }
  report_unfinished(-1);
  return Status::NotFound(fmt::format("no valid checkpoint in {}", fmt::join(where, ", ")));
}

Result<LoadedCheckpoint> LoadCheckpointAt(const std::string& uri, const StorageOpener& open,
                                          std::vector<std::string>* skipped, const FileFilter& want,
                                          std::vector<std::string>* unfinished) {
  std::string u = uri;
  while (u.size() > 1 && u.back() == '/') u.pop_back();
  const size_t slash = u.rfind('/');
  const std::string base = slash == std::string::npos ? u : u.substr(slash + 1);
  if (!IsS3Uri(u) && !std::filesystem::exists(u))
    return Status::NotFound(fmt::format("{} does not exist", u));
  if (ParseStepDirName(base)) {
    const std::string parent = slash == std::string::npos ? "." : u.substr(0, slash);
    TERN_ASSIGN_OR_RETURN(auto storage, open(parent));
    return LoadCheckpoint(*storage, base, want);
  }
  TERN_ASSIGN_OR_RETURN(auto storage, open(u));
  return NewestIn(*storage, skipped, want, unfinished);
}

}  // namespace tern::ckpt
