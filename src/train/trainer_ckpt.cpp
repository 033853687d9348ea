// The checkpoint half of the Trainer: opening the tiers and resuming, periodic and best saves, metrics rows
// for every save, and the emergency save on a preemption notice.
#include <chrono>

#include <fmt/ranges.h>

#include "train/trainer.h"

namespace tern {

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DataIdentity Trainer::data_identity() const {
  return {tokenizer_->fingerprint(), train_loader_->tokens(), train_loader_->windows_per_epoch(),
          train_loader_->content_fingerprint()};
}

Status Trainer::CaptureSnapshotMeta(ckpt::Snapshot& snap) {
  TrainProgress p{step_, tokens_seen_, train_seconds_, train_loader_->position(), adam_t_, std::nullopt};
  if (setup_.compute == Compute::kF16) p.loss_scale = scaler_.state();
  snap.gather_files = nullptr;
  if (sharded_saves()) {  // the other ranks' optimizer shards, once they are durable (trainer_shards.cpp)
    snap.gather_files = [this](ckpt::Storage&,
                               const Status& mine) -> Result<std::vector<ckpt::ManifestFile>> {
      shard_exchanges_++;
      Result<std::vector<ckpt::ManifestFile>> files = Status::Internal("no exchange");
      const Result<ckpt::ManifestFile> me =
          mine.ok() ? Result<ckpt::ManifestFile>(ckpt::ManifestFile{}) : mine;
      if (Status comm = ExchangeShardFiles(me, &files); !comm.ok()) {
        if (shard_comm_failure_.ok()) shard_comm_failure_ = comm;
        return comm;
      }
      return files;
    };
  }
  return CaptureTrainMeta(*model_, cfg_, data_identity(), p, &snap);
}

Status Trainer::CopySnapshotTensors(ckpt::Snapshot& snap) {
  return sharded_saves() ? CopyModelState(*model_, &snap, rank(), world()) : CopyModelState(*model_, &snap);
}

// ZeRO-1 at world > 1 saves synchronously: the manifest exchange is a collective, so it runs on the training
// thread, at the same point on every rank.
Status Trainer::SaveTo(const std::vector<int>& tiers, const std::string& kind, std::optional<double> val_loss,
                       bool sync) {
  shard_exchanges_ = 0;
  shard_comm_failure_ = Status::Ok();
  // The copy may run on the writer thread: Step() calls WaitForSnapshot() before the next AdamW update.
  Status st = ckpt_->Save(
      step_, tiers, kind, val_loss, [this](ckpt::Snapshot& s) { return CaptureSnapshotMeta(s); },
      [this](ckpt::Snapshot& s) { return CopySnapshotTensors(s); }, sync || sharded_saves());
  if (!sharded_saves()) return st;
  // A save that stopped before persisting a tier (its capture failed): the other ranks still wait for it.
  while (shard_exchanges_ < tiers.size() && shard_comm_failure_.ok()) {
    shard_exchanges_++;
    Result<std::vector<ckpt::ManifestFile>> files = Status::Internal("no exchange");
    const Status why = st.ok() ? Status::Internal("rank 0's save stopped before this tier") : st;
    TERN_RETURN_IF_ERROR(ExchangeShardFiles(why, &files));
  }
  TERN_RETURN_IF_ERROR(shard_comm_failure_);
  return st;
}

bool Trainer::AbandonRequested() const {
  return watcher_ && cfg_.ckpt.on_notice == OnNotice::kAbandon && watcher_->notified();
}

Status Trainer::OpenCheckpoints(nlohmann::json* resume_row) {
  ckpt::ManagerOptions mo = CheckpointManagerOptions(cfg_);
  mo.open_storage = env_.open_storage;
  TERN_ASSIGN_OR_RETURN(ckpt_, ckpt::CheckpointManager::Open(mo));
  ckpt::PreemptionOptions po;
  po.signals = env_.handle_signals;
  po.url = cfg_.ckpt.notice_url;
  po.kind = NoticeKindName(cfg_.ckpt.notice_kind);
  po.poll_s = cfg_.ckpt.notice_poll_s;
  po.signal_window_s = cfg_.ckpt.notice_window_s;
  TERN_ASSIGN_OR_RETURN(watcher_, ckpt::PreemptionWatcher::Start(po));
  OpenIntervalTuner();

  const ResumeFrom& from = cfg_.ckpt.resume;
  if (from.mode == ResumeFrom::Mode::kNone) return Status::Ok();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> skipped;
  std::vector<std::string> unfinished;
  Result<ckpt::LoadedCheckpoint> loaded = Status::NotFound("");
  // ZeRO-1: this rank reads only the optimizer shard files that cover its own shard.
  const ckpt::FileFilter want = ResumeFiles(model_->trainable(), model_->optimizer_shard());
  if (from.mode == ResumeFrom::Mode::kAuto) {
    loaded = ckpt_->LoadNewestValid(&skipped, want, &unfinished);
  } else {
    ckpt::StorageOpener open = mo.open_storage;
    if (!open) open = [s3 = mo.s3](const std::string& uri) { return ckpt::OpenStorage(uri, s3); };
    loaded = ckpt::LoadCheckpointAt(from.path, open, &skipped, want, &unfinished);
  }
  for (const auto& s : unfinished)
    if (!quiet_) std::fprintf(stderr, "tern train: skipping an unfinished checkpoint: %s\n", s.c_str());
  for (const auto& s : skipped)
    if (!quiet_) std::fprintf(stderr, "tern train: skipping a damaged checkpoint: %s\n", s.c_str());
  if (!loaded.ok()) {
    if (from.mode == ResumeFrom::Mode::kAuto && loaded.status().code() == Status::Code::kNotFound) {
      if (!quiet_) std::fprintf(stderr, "tern train: no checkpoint to resume from; starting at step 0\n");
      if (!skipped.empty()) *resume_row = {{"event", "resume"}, {"step", 0}, {"skipped", skipped}};
      return Status::Ok();
    }
    return loaded.status().WithContext("resuming (ckpt.resume=" + from.ToString() + ")");
  }
  TERN_ASSIGN_OR_RETURN(RestoredTrain r, RestoreTrainState(*loaded, cfg_, data_identity(), model_.get()));
  step_ = r.progress.step;
  tokens_seen_ = r.progress.tokens_seen;
  train_seconds_ = r.progress.train_seconds;
  adam_t_ = r.progress.adam_t >= 0 ? r.progress.adam_t : step_;
  // The scale is training state: a resumed fp16 run continues with the saved one, whatever fp16.initial_scale
  // says (that key only starts fresh runs). A checkpoint of another precision has none: start from the
  // config.
  if (setup_.compute == Compute::kF16 && r.progress.loss_scale) scaler_.set_state(*r.progress.loss_scale);
  TERN_RETURN_IF_ERROR(train_loader_->Restore(r.progress.loader).WithContext("restoring the data position"));
  resumed_from_ = step_;
  last_saved_step_ = step_;
  const double load_s = SecondsSince(t0);
  if (!quiet_) {
    std::fprintf(stderr, "tern train: resumed from %s (step %d) in %.2f s\n", loaded->location.c_str(), step_,
                 load_s);
    for (const auto& c : r.changes)
      std::fprintf(stderr, "tern train: config changed since the checkpoint: %s\n", c.c_str());
  }
  *resume_row = {{"event", "resume"},        {"step", step_},
                 {"from", loaded->location}, {"load_ms", load_s * 1e3},
                 {"skipped", skipped},       {"unfinished", unfinished},
                 {"changes", r.changes},     {"since_process_start_s", ProcessAgeSeconds()}};
  return Status::Ok();
}

Status Trainer::SaveCheckpoint(const std::string& kind) {
  std::vector<int> tiers = {ckpt_->FindTier("fast")};
  TERN_RETURN_IF_ERROR(JoinSave(&tiers));
  if (tiers.empty()) return Status::Ok();
  TERN_RETURN_IF_ERROR(SaveTo(tiers, kind, std::nullopt, /*sync=*/true));
  Status failure;
  TERN_RETURN_IF_ERROR(DrainCheckpointEvents(nullptr, &failure));
  if (failure.ok()) last_saved_step_ = step_;
  return failure;
}

Status Trainer::MaybeCheckpoint(int step, bool last, std::optional<double> val_loss, ProgressBar* bar) {
  std::vector<int> tiers;
  bool periodic = false;
  for (int t = 0; t < ckpt_->num_tiers(); t++) {
    const auto& tier = ckpt_->tier(t);
    if (Cadence(t) > 0 && (PeriodicDue(t, step) || last)) {
      tiers.push_back(t);
      periodic = periodic || PeriodicDue(t, step);
    } else if (tier.keep.keep_best > 0 && val_loss && ckpt_->WouldKeepBest(t, *val_loss)) {
      tiers.push_back(t);
    }
  }
  // Rank 0 saves (and decides for ZeRO-1's shard files); every rank holds the same weights.
  TERN_RETURN_IF_ERROR(JoinSave(&tiers));
  if (!tiers.empty()) {
    const std::string kind = periodic ? "periodic" : last ? "final" : "best";
    TERN_RETURN_IF_ERROR(SaveTo(tiers, kind, val_loss, /*sync=*/false));
    IntervalSaveStarted(step, tiers);
    last_saved_step_ = step;
  }
  Status failure;
  TERN_RETURN_IF_ERROR(DrainCheckpointEvents(bar, &failure));
  if (!failure.ok() && cfg_.ckpt.on_error == OnSaveError::kStop) {
    return failure.WithContext(
        "checkpoint failed and ckpt.on_error=stop (the previous checkpoint is intact)");
  }
  return Status::Ok();
}

Status Trainer::DrainCheckpointEvents(ProgressBar* bar, Status* failure) {
  Status first_error;
  for (const auto& e : ckpt_->TakeEvents()) {
    ObserveIntervalSave(e);
    nlohmann::json row = {{"event", "checkpoint"}, {"step", e.step}, {"tier", e.tier}, {"kind", e.kind}};
    if (e.skipped) {
      row["event"] = "checkpoint_skipped";
      row["reason"] = "the previous save was still being written (ckpt.when_busy=skip)";
      if (bar)
        bar->Print(
            fmt::format("checkpoint step {} ({}) skipped: previous save still in flight", e.step, e.tier));
    } else if (!e.status.ok()) {
      row["event"] = "checkpoint_failed";
      row["error"] = e.status.message();
      if (bar)
        bar->Print(fmt::format("checkpoint step {} ({}) FAILED: {}", e.step, e.tier, e.status.message()));
      if (!quiet_ && !bar)
        std::fprintf(stderr, "tern train: checkpoint failed: %s\n", e.status.message().c_str());
      if (first_error.ok()) first_error = e.status;
    } else {
      row.update({{"stall_ms", e.stall_ms},
                  {"wait_ms", e.wait_ms},
                  {"copy_ms", e.copy_ms},
                  {"persist_ms", e.persist_ms},
                  {"bytes", e.bytes},
                  {"location", e.location},
                  {"removed", e.removed}});
    }
    TERN_RETURN_IF_ERROR(log_.Write(row));
  }
  if (failure) *failure = first_error;
  return Status::Ok();
}

Status Trainer::EmergencyCheckpoint(TrainSummary* sum, ProgressBar* bar) {
  sum->preempted = true;
  sum->steps = step_;
  sum->tokens = tokens_seen_;
  sum->train_s = train_seconds_;
  if (!writer()) {  // rank 0 saves this step for everyone (ZeRO-1: with this rank's shard)
    std::vector<int> tiers;
    TERN_RETURN_IF_ERROR(JoinSave(&tiers));
    sum->preempt_report =
        fmt::format("preempted: rank {} stops at step {} with the others; rank 0 saves it", rank(), step_);
    // Wait for rank 0's save: a rank that left first could make the launcher end the job under it.
    return comm_->Barrier().WithContext("waiting for rank 0's emergency checkpoint");
  }
  ckpt::PreemptionNotice notice = watcher_->notice();
  if (!watcher_->notified()) {  // the notice reached another rank; the vote brought it here
    notice.source = "a notice to another rank";
    notice.at = std::chrono::steady_clock::now();
    notice.window_s = cfg_.ckpt.notice_window_s;
  }
  const auto t0 = std::chrono::steady_clock::now();
  // The fastest tier that outlives the instance: the fast one, unless its disk dies with the machine.
  int tier = ckpt_->FindTier("fast");
  if (!cfg_.ckpt.fast_survives && ckpt_->FindTier("durable") >= 0) tier = ckpt_->FindTier("durable");
  ckpt_->WaitIdle();  // a save in flight finishes first (it may already hold this very step)
  TERN_RETURN_IF_ERROR(DrainCheckpointEvents(bar));
  Status st;
  std::string what;
  if (ckpt_->NewestStep(tier) == step_) {
    what = "already saved by the save in flight";
    std::vector<int> none;
    TERN_RETURN_IF_ERROR(JoinSave(&none));
  } else {
    std::vector<int> tiers = {tier};
    TERN_RETURN_IF_ERROR(JoinSave(&tiers));
    st = SaveTo(tiers, "emergency", std::nullopt, /*sync=*/true);
    Status failure;
    TERN_RETURN_IF_ERROR(DrainCheckpointEvents(bar, &failure));
    if (st.ok()) st = failure;
    what = st.ok() ? "saved" : "FAILED: " + st.message();
  }
  const double save_s = SecondsSince(t0);
  const double since_notice =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - notice.at).count();
  const std::string location = ckpt::JoinKey(ckpt_->storage(tier).uri(), ckpt::StepDirName(step_));
  sum->preempt_report = fmt::format(
      "preempted ({}): step {} {} to {} in {:.2f} s; {:.2f} s after the notice, {} the {:.0f} s window. "
      "Resume "
      "with --resume auto.",
      notice.source, step_, what, location, save_s, since_notice,
      since_notice <= notice.window_s ? "inside" : "OUTSIDE", notice.window_s);
  if (bar) bar->Print(sum->preempt_report);
  TERN_RETURN_IF_ERROR(log_.Write({{"event", "preempted"},
                                   {"source", notice.source},
                                   {"step", step_},
                                   {"tier", ckpt_->tier(tier).name},
                                   {"location", location},
                                   {"saved", st.ok()},
                                   {"save_s", save_s},
                                   {"since_notice_s", since_notice},
                                   {"window_s", notice.window_s},
                                   {"margin_s", notice.window_s - since_notice}}));
  if (world() > 1) TERN_RETURN_IF_ERROR(comm_->Barrier().WithContext("releasing the other ranks"));
  return Status::Ok();  // even a failed save leaves the run resumable from the previous checkpoint
}

}  // namespace tern
