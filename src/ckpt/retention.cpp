#include "ckpt/retention.h"

#include <algorithm>
#include <map>
#include <set>

namespace tern::ckpt {

RetentionPlan PlanRetention(const std::vector<RetentionEntry>& entries, const RetentionPolicy& policy,
                            bool no_save_in_flight) {
  std::vector<RetentionEntry> valid;
  for (const auto& e : entries)
    if (e.valid) valid.push_back(e);
  std::sort(valid.begin(), valid.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  std::set<int64_t> keep;
  const int64_t newest = valid.empty() ? -1 : valid.back().step;
  if (newest >= 0) keep.insert(newest);
  for (size_t i = 0; i < valid.size(); i++) {
    const bool recent = policy.keep_last <= 0 || i + policy.keep_last >= valid.size();
    const bool milestone = policy.keep_every > 0 && valid[i].step % policy.keep_every == 0;
    if (recent || milestone) keep.insert(valid[i].step);
  }
  if (policy.keep_best > 0) {
    std::vector<RetentionEntry> scored;
    for (const auto& e : valid)
      if (e.val_loss) scored.push_back(e);
    // Lowest loss first; on a tie the newer checkpoint wins (it saw more data).
    std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
      return *a.val_loss != *b.val_loss ? *a.val_loss < *b.val_loss : a.step > b.step;
    });
    for (size_t i = 0; i < scored.size() && i < static_cast<size_t>(policy.keep_best); i++)
      keep.insert(scored[i].step);
  }
  RetentionPlan plan;
  for (const auto& e : entries) {
    if (keep.count(e.step)) continue;
    if (!e.valid && e.step > newest && !no_save_in_flight) continue;  // maybe being written right now
    plan.remove.push_back(e.step);
  }
  plan.keep.assign(keep.begin(), keep.end());
  std::sort(plan.remove.begin(), plan.remove.end());
  plan.remove.erase(std::unique(plan.remove.begin(), plan.remove.end()), plan.remove.end());
  return plan;
}

Status DeleteCheckpoint(Storage& storage, const std::string& dir) {
  TERN_ASSIGN_OR_RETURN(auto objects, storage.List(dir + "/"));
  const std::string manifest = JoinKey(dir, kManifestName);
  TERN_RETURN_IF_ERROR(storage.Delete(manifest));
  TERN_RETURN_IF_ERROR(storage.SyncDir(dir));
  for (const auto& o : objects)
    if (o.key != manifest) TERN_RETURN_IF_ERROR(storage.Delete(o.key));
  return storage.SyncDir("");
}

Result<GcReport> CollectGarbage(Storage& storage, const RetentionPolicy& policy, bool no_save_in_flight,
                                bool dry_run, bool verify_newest) {
  TERN_ASSIGN_OR_RETURN(auto refs, ListCheckpoints(storage));
  std::vector<RetentionEntry> entries;
  std::map<int64_t, const CheckpointRef*> by_step;
  for (const auto& r : refs) {
    RetentionEntry e{r.step, r.has_manifest, std::nullopt};
    if (r.has_manifest && policy.keep_best > 0) {
      auto text = storage.Get(JoinKey(r.dir, kManifestName));
      auto m = text.ok() ? Manifest::Parse(*text) : Result<Manifest>(text.status());
      if (m.ok())
        e.val_loss = m->val_loss;
      else
        e.valid = false;  // an unreadable manifest is debris
    }
    entries.push_back(e);
    by_step[r.step] = &r;
  }
  if (verify_newest) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (!it->valid) continue;
      if (VerifyCheckpoint(storage, by_step[it->step]->dir).ok) break;
      it->valid = false;  // damaged: debris, and not the checkpoint that must survive
    }
  }
  RetentionPlan plan = PlanRetention(entries, policy, no_save_in_flight);
  GcReport report;
  report.kept = plan.keep;
  for (int64_t step : plan.remove) {
    if (!dry_run) TERN_RETURN_IF_ERROR(DeleteCheckpoint(storage, by_step[step]->dir));
    report.removed.push_back(step);
    report.bytes_freed += by_step[step]->bytes;
  }
  return report;
}

}  // namespace tern::ckpt
