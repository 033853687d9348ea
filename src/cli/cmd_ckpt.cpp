// tern ckpt ls|verify|export|gc TARGET [--json]
// TARGET: a run directory (its tiers come from RUN_DIR/config.yaml), a tier root (a directory or
// s3://bucket/prefix), or for verify/export one step directory (.../step_00001200).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "ckpt/manager.h"
#include "ckpt/retention.h"
#include "cli/command.h"
#include "core/progress.h"
#include "infer/weights.h"
#include "model/safetensors.h"
#include "registry/model_uri.h"
#include "train/train_checkpoint.h"
#include "train/train_config.h"

namespace tern::cli {
namespace {

namespace fs = std::filesystem;

struct CkptOptions {
  std::string target, out, format = "safetensors", s3_endpoint;
  bool json = false, dry_run = false, force = false;
  int keep_last = -1, keep_every = -1, keep_best = -1;  // -1 = from config.yaml (or 2, 0, 0)
};

struct TierRef {
  std::string name, uri;
  ckpt::RetentionPolicy keep{2, 0, 0};
};

int Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "tern ckpt %s: %s\n", cmd, st.message().c_str());
  return 1;
}

ckpt::S3Options S3For(const CkptOptions& o, const TrainConfig* cfg) {
  ckpt::S3Options s3;
  s3.endpoint = !o.s3_endpoint.empty() ? o.s3_endpoint : cfg ? cfg->ckpt.s3_endpoint : "";
  if (cfg) s3.region = cfg->ckpt.s3_region;
  return s3;
}

// A run directory gives its configured tiers; anything else is one tier root.
Result<std::vector<TierRef>> ResolveTiers(const CkptOptions& o, ckpt::S3Options* s3) {
  std::vector<TierRef> tiers;
  const std::string config = o.target + "/config.yaml";
  if (!ckpt::IsS3Uri(o.target) && fs::exists(config)) {
    TrainConfig cfg;
    TERN_RETURN_IF_ERROR(LoadTrainConfigFile(config, &cfg));
    cfg.run_dir = o.target;  // default tier paths are relative to the run directory as given here
    *s3 = S3For(o, &cfg);
    for (const auto& t : CheckpointManagerOptions(cfg).tiers) {
      bool local = !ckpt::IsS3Uri(t.uri);
      if (local && !fs::exists(t.uri)) continue;
      tiers.push_back({t.name, t.uri, t.keep});
    }
  } else {
    if (!ckpt::IsS3Uri(o.target) && !fs::is_directory(o.target))
      return Status::NotFound(fmt::format("{} is not a directory", o.target));
    *s3 = S3For(o, nullptr);
    tiers.push_back({"tier", o.target, {2, 0, 0}});
  }
  for (auto& t : tiers) {
    if (o.keep_last >= 0) t.keep.keep_last = o.keep_last;
    if (o.keep_every >= 0) t.keep.keep_every = o.keep_every;
    if (o.keep_best >= 0) t.keep.keep_best = o.keep_best;
  }
  return tiers;
}

// ".../step_00000100" -> (".../", "step_00000100"), or nullopt when the target is not a step directory.
std::optional<std::pair<std::string, std::string>> SplitStepDir(std::string target) {
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  const size_t slash = target.rfind('/');
  std::string base = slash == std::string::npos ? target : target.substr(slash + 1);
  if (!ckpt::ParseStepDirName(base)) return std::nullopt;
  return std::make_pair(slash == std::string::npos ? std::string(".") : target.substr(0, slash), base);
}

int RunLs(const CkptOptions& o) {
  ckpt::S3Options s3;
  auto tiers = ResolveTiers(o, &s3);
  if (!tiers.ok()) return Fail("ls", tiers.status());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : *tiers) {
    auto storage = ckpt::OpenStorage(t.uri, s3);
    if (!storage.ok()) return Fail("ls", storage.status());
    auto refs = ckpt::ListCheckpoints(**storage);
    if (!refs.ok()) return Fail("ls", refs.status());
    nlohmann::json tier = {
        {"tier", t.name}, {"uri", (*storage)->uri()}, {"checkpoints", nlohmann::json::array()}};
    if (!o.json) std::printf("%s  %s\n", t.name.c_str(), (*storage)->uri().c_str());
    for (const auto& r : *refs) {
      nlohmann::json row = {
          {"step", r.step}, {"dir", r.dir}, {"bytes", r.bytes}, {"complete", r.has_manifest}};
      std::string line = fmt::format("  {:>10}  {:>10}  ", r.step, ProgressBar::FormatAmount(r.bytes, "B"));
      if (r.has_manifest) {
        auto text = (*storage)->Get(ckpt::JoinKey(r.dir, ckpt::kManifestName));
        auto m = text.ok() ? ckpt::Manifest::Parse(*text) : Result<ckpt::Manifest>(text.status());
        if (m.ok()) {
          row.update({{"kind", m->kind}, {"created_utc", m->created_utc}});
          if (m->val_loss) row["val_loss"] = *m->val_loss;
          line += fmt::format("{:<9} {}{}", m->kind, m->created_utc,
                              m->val_loss ? fmt::format("  val {:.4f}", *m->val_loss) : "");
        } else {
          row["error"] = m.status().message();
          line += "manifest unreadable: " + m.status().message();
        }
      } else {
        line += "incomplete (no manifest: an unfinished save)";
      }
      tier["checkpoints"].push_back(row);
      if (!o.json) std::printf("%s\n", line.c_str());
    }
    if (!o.json && refs->empty()) std::printf("  (no checkpoints)\n");
    out.push_back(tier);
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int RunVerify(const CkptOptions& o) {
  std::vector<std::pair<std::shared_ptr<ckpt::Storage>, std::string>> todo;  // (storage, step dir)
  if (auto split = SplitStepDir(o.target)) {
    auto storage = ckpt::OpenStorage(split->first, S3For(o, nullptr));
    if (!storage.ok()) return Fail("verify", storage.status());
    todo.emplace_back(std::move(*storage), split->second);
  } else {
    ckpt::S3Options s3;
    auto tiers = ResolveTiers(o, &s3);
    if (!tiers.ok()) return Fail("verify", tiers.status());
    for (const auto& t : *tiers) {
      auto opened = ckpt::OpenStorage(t.uri, s3);
      if (!opened.ok()) return Fail("verify", opened.status());
      std::shared_ptr<ckpt::Storage> storage = std::move(*opened);
      auto refs = ckpt::ListCheckpoints(*storage);
      if (!refs.ok()) return Fail("verify", refs.status());
      for (const auto& r : *refs) todo.emplace_back(storage, r.dir);
    }
  }
  nlohmann::json out = nlohmann::json::array();
  int bad = 0;
  for (auto& [storage, dir] : todo) {
    ckpt::VerifyReport r = ckpt::VerifyCheckpoint(*storage, dir);
    const std::string where = ckpt::JoinKey(storage->uri(), dir);
    if (!r.ok) bad++;
    out.push_back({{"location", where}, {"step", r.step}, {"ok", r.ok}, {"problems", r.problems}});
    if (!o.json) {
      std::printf("%s  %s\n", r.ok ? "ok     " : "DAMAGED", where.c_str());
      for (const auto& p : r.problems) std::printf("           %s\n", p.c_str());
    }
  }
  if (o.json)
    std::printf("%s\n", out.dump(2).c_str());
  else
    std::printf("%zu checkpoint(s) checked, %d damaged or incomplete\n", todo.size(), bad);
  return bad == 0 ? 0 : 1;
}

int RunExport(const CkptOptions& o) {
  if (o.format != "safetensors") return Fail("export", Status::InvalidArgument("--format: only safetensors"));
  if (o.out.empty()) return Fail("export", Status::InvalidArgument("--out FILE is required"));
  if (registry::IsModelUri(o.target)) {  // a registered model: verified, and already in this format
    Status st = registry::ExportModelUri(o.target, o.out);
    return st.ok() ? 0 : Fail("export", st);
  }
  std::vector<std::string> skipped;
  ckpt::S3Options s3;
  Result<ckpt::LoadedCheckpoint> loaded = Status::NotFound("no checkpoint");
  if (SplitStepDir(o.target)) {
    s3 = S3For(o, nullptr);
    loaded = ckpt::LoadCheckpointAt(
        o.target, [&](const std::string& u) { return ckpt::OpenStorage(u, s3); }, &skipped);
  } else {
    auto tiers = ResolveTiers(o, &s3);
    if (!tiers.ok()) return Fail("export", tiers.status());
    ckpt::ManagerOptions mo;
    for (const auto& t : *tiers) mo.tiers.push_back({t.name, t.uri, 0, t.keep});
    mo.async = false;
    mo.s3 = s3;
    auto manager = ckpt::CheckpointManager::Open(mo);
    if (!manager.ok()) return Fail("export", manager.status());
    loaded = (*manager)->LoadNewestValid(&skipped);
  }
  for (const auto& s : skipped) std::fprintf(stderr, "tern ckpt export: skipped damaged %s\n", s.c_str());
  if (!loaded.ok()) return Fail("export", loaded.status());
  auto tensors = ckpt::ParseSafetensors(loaded->files["tensors.safetensors"]);
  if (!tensors.ok()) return Fail("export", tensors.status());
  // The model's shape from the tern.* metadata; a LoRA checkpoint's adapters merged into the weights.
  auto weights = WeightsFromCheckpointTensors(*tensors, loaded->location + "/tensors.safetensors");
  if (!weights.ok()) return Fail("export", weights.status());
  const GptConfig cfg = weights->config;
  const std::vector<float>& params = weights->params;
  Status st = WriteGptSafetensors(
      o.out, cfg, params,
      {{"tern.tokenizer", loaded->manifest.tokenizer}, {"tern.step", std::to_string(loaded->manifest.step)}});
  if (!st.ok()) return Fail("export", st);
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"from", loaded->location},
                                        {"step", loaded->manifest.step},
                                        {"out", o.out},
                                        {"params", params.size()}})
                            .dump(2)
                            .c_str());
  } else {
    std::printf("wrote %s from %s (step %lld): %s, %zu parameters, Hugging Face GPT-2 names (fp32)\n",
                o.out.c_str(), loaded->location.c_str(), static_cast<long long>(loaded->manifest.step),
                cfg.ToString().c_str(), params.size());
  }
  return 0;
}

int RunGc(const CkptOptions& o) {
  ckpt::S3Options s3;
  auto tiers = ResolveTiers(o, &s3);
  if (!tiers.ok()) return Fail("gc", tiers.status());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : *tiers) {
    auto storage = ckpt::OpenStorage(t.uri, s3);
    if (!storage.ok()) return Fail("gc", storage.status());
    auto report = ckpt::CollectGarbage(**storage, t.keep, /*no_save_in_flight=*/o.force, o.dry_run,
                                       /*verify_newest=*/true);
    if (!report.ok()) return Fail("gc", report.status());
    out.push_back({{"tier", t.name},
                   {"uri", (*storage)->uri()},
                   {"kept", report->kept},
                   {"removed", report->removed},
                   {"bytes_freed", report->bytes_freed},
                   {"dry_run", o.dry_run}});
    if (!o.json) {
      std::printf("%s  %s: keep_last %d, keep_every %d, keep_best %d\n", t.name.c_str(),
                  (*storage)->uri().c_str(), t.keep.keep_last, t.keep.keep_every, t.keep.keep_best);
      std::printf("  kept     %s\n  %s  %s (%s)\n", fmt::format("{}", fmt::join(report->kept, " ")).c_str(),
                  o.dry_run ? "would remove" : "removed",
                  fmt::format("{}", fmt::join(report->removed, " ")).c_str(),
                  ProgressBar::FormatAmount(report->bytes_freed, "B").c_str());
    }
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

void AddCkptCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<CkptOptions>();
  auto* sub = root.add_subcommand("ckpt", "List, verify, export and garbage-collect checkpoints");
  sub->require_subcommand(1);
  sub->footer(
      "\nTARGET is a run directory (tiers from its config.yaml), a tier root (directory or "
      "s3://bucket/prefix),\n"
      "or for verify/export a single step directory. S3 credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
      "or\n"
      "~/.aws/credentials; endpoint: --s3-endpoint or $AWS_ENDPOINT_URL_S3. See docs/checkpoints.md.\n"
      "  tern ckpt ls runs/demo\n  tern ckpt verify runs/demo/checkpoints/step_00000600\n"
      "  tern ckpt export runs/demo --out demo.safetensors\n  tern ckpt gc runs/demo --keep-last 1 "
      "--dry-run");
  auto add_common = [&](CLI::App* c) {
    c->add_option("target", o->target, "run directory, tier root or step directory")->required();
    c->add_flag("--json", o->json, "machine-readable output");
    c->add_option("--s3-endpoint", o->s3_endpoint, "S3-compatible endpoint URL (MinIO, R2, moto)");
  };
  auto* ls = sub->add_subcommand("ls", "list checkpoints per tier: step, size, kind, time, val loss");
  add_common(ls);
  table.Add(ls, [o] { return RunLs(*o); });
  auto* verify =
      sub->add_subcommand("verify", "check every file against the manifest; exit 1 naming any damage");
  add_common(verify);
  table.Add(verify, [o] { return RunVerify(*o); });
  auto* exp =
      sub->add_subcommand("export", "write the newest valid (or the given) checkpoint's weights for HF");
  add_common(exp);
  exp->add_option("--out", o->out, "output file")->required();
  exp->add_option("--format", o->format, "safetensors (Hugging Face GPT-2 names, fp32)");
  table.Add(exp, [o] { return RunExport(*o); });
  auto* gc =
      sub->add_subcommand("gc", "apply retention: delete what the policy does not keep (manifest first)");
  add_common(gc);
  gc->add_option("--keep-last", o->keep_last, "keep the newest N (default: config.yaml, else 2)");
  gc->add_option("--keep-every", o->keep_every, "keep multiples of N (milestones)");
  gc->add_option("--keep-best", o->keep_best, "keep the K lowest validation losses");
  gc->add_flag("--dry-run", o->dry_run, "report only");
  gc->add_flag("--force", o->force,
               "also remove unfinished saves newer than the newest valid checkpoint "
               "(only when no `tern train` is writing here)");
  table.Add(gc, [o] { return RunGc(*o); });
}

}  // namespace tern::cli
