#include "train/train_checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "dist/communicator.h"
#include "model/safetensors.h"
#include "train/lr_schedule.h"

namespace tern {

namespace {

constexpr char kTensors[] = "tensors.safetensors";
constexpr char kOptimizer[] = "optimizer.safetensors";
constexpr char kTrainer[] = "trainer.json";

// Keys whose change makes the saved state meaningless or the data order different: refused on resume.
const char* const kMustMatch[] = {"model.n_layer",    "model.n_head",     "model.n_embd",  "model.vocab_size",
                                  "model.block_size", "train.batch_size", "train.seq_len", "train.seed"};

// The shape (model/safetensors.h) and tern's [out, in] matrices (`tern ckpt export` gives HF names).
std::map<std::string, std::string> TensorsMetadata(const GptConfig& m) {
  std::map<std::string, std::string> meta = ShapeMetadata(m);
  meta["tern.layout"] = "tern";
  return meta;
}

// adam.m and adam.v of the model's optimizer shard (the whole of it without ZeRO-1).
std::unique_ptr<ckpt::SafetensorsImage> MomentsImage(const Gpt& model, bool shard_file) {
  const GradRange sh = model.optimizer_shard();
  const int64_t n = static_cast<int64_t>(sh.count);
  std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"tern.optimizer", "adamw"},
      {"tern.layout", "flat, in the parameter order of tensors.safetensors"}};
  if (shard_file) {
    meta["tern.shard_offset"] = std::to_string(sh.offset);
    meta["tern.shard_count"] = std::to_string(sh.count);
    meta["tern.num_params"] = std::to_string(model.num_params());
  }
  return std::make_unique<ckpt::SafetensorsImage>(
      std::vector<ckpt::TensorSpec>{{"adam.m", {n}}, {"adam.v", {n}}}, meta);
}

// The images for this model, made on the first save (and again only if the model or the shard changed).
void EnsureImages(const Gpt& model, ckpt::Snapshot* snap, const std::string& moments_name) {
  const size_t bytes = model.num_params() * 4, moment_bytes = model.optimizer_shard().count * 4;
  if (snap->images.size() == 2 && snap->images[0].second->data_bytes() == bytes &&
      snap->images[1].first == moments_name && snap->images[1].second->data_bytes() == 2 * moment_bytes) {
    return;
  }
  snap->images.clear();
  std::vector<ckpt::TensorSpec> params;
  for (const auto& t : model.layout()) params.push_back({t.name, t.shape});
  std::map<std::string, std::string> meta = TensorsMetadata(model.config());
  // With LoRA the adapters follow the base tensors; readers merge them (infer/weights.h).
  for (auto& [k, v] : LoraMetadata(model.lora())) meta[k] = v;
  snap->images.emplace_back(kTensors, std::make_unique<ckpt::SafetensorsImage>(params, meta));
  snap->images.emplace_back(moments_name, MomentsImage(model, moments_name != kOptimizer));
}

void DownloadMoments(const Gpt& model, ckpt::SafetensorsImage* image) {
  const size_t bytes = model.optimizer_shard().count * 4;
  model.backend()->Download(image->tensor(0), model.adam_m(), bytes);
  model.backend()->Download(image->tensor(1), model.adam_v(), bytes);
}

// Copies into `out` (the moments of [mine.offset, + mine.count)) the part of one moments file, holding
// [from.offset, + from.count), that overlaps it; returns how many elements it copied.
Result<size_t> CopyOverlap(const ckpt::ParsedSafetensors& file, const std::string& where, GradRange from,
                           GradRange mine, float* out_m, float* out_v) {
  float* outs[2] = {out_m, out_v};
  const char* names[2] = {"adam.m", "adam.v"};
  const size_t b = std::max(from.offset, mine.offset),
               e = std::min(from.offset + from.count, mine.offset + mine.count);
  for (int i = 0; i < 2; i++) {
    auto it = file.tensors.find(names[i]);
    if (it == file.tensors.end() || it->second.dtype != "F32" || it->second.data.size() != from.count * 4)
      return Status::Corruption(
          fmt::format("{}: {} missing or mis-sized (want {} F32 values)", where, names[i], from.count));
    if (b < e)
      std::memcpy(outs[i] + (b - mine.offset), it->second.data.data() + (b - from.offset) * 4, (e - b) * 4);
  }
  return b < e ? e - b : 0;
}

// The moments of the model's shard from optimizer.safetensors (whole) or from the shard files loaded.
Status RestoreMoments(const ckpt::LoadedCheckpoint& ck, Gpt* model) {
  const GradRange mine = model->optimizer_shard();  // all of it without ZeRO-1
  const GradRange trainable = model->trainable();
  std::vector<float> m(mine.count), v(mine.count);
  size_t covered = 0;
  std::vector<std::string> used;
  for (const auto& [name, bytes] : ck.files) {
    GradRange from;
    if (name == kOptimizer) {
      from = trainable;
    } else if (auto rw = ParseOptimizerShardName(name)) {
      from = TrainableShard(trainable, rw->second, rw->first);
    } else {
      continue;
    }
    TERN_ASSIGN_OR_RETURN(auto file, ckpt::ParseSafetensors(bytes));
    TERN_ASSIGN_OR_RETURN(size_t got,
                          CopyOverlap(file, ck.location + "/" + name, from, mine, m.data(), v.data()));
    covered += got;
    if (got > 0) used.push_back(name);
  }
  // The shard files of one world tile the parameters, so full coverage is covered == mine.count.
  if (covered != mine.count) {
    return Status::Corruption(
        fmt::format("{}: the optimizer files cover {} of the {} AdamW moments of this rank's shard [{}, {}) "
                    "(files used: {}); "
                    "the checkpoint lacks optimizer.safetensors or some optimizer-*-of-*.safetensors: resume "
                    "from another "
                    "checkpoint (ckpt.resume=PATH)",
                    ck.location, covered, mine.count, mine.offset, mine.offset + mine.count,
                    used.empty() ? "none" : fmt::format("{}", fmt::join(used, ", "))));
  }
  model->backend()->Upload(model->adam_m(), m.data(), mine.count * 4);
  model->backend()->Upload(model->adam_v(), v.data(), mine.count * 4);
  return Status::Ok();
}

}  // namespace

std::string ResumeFingerprint(const TrainConfig& cfg, const DataIdentity& data) {
  std::string key;
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : TrainConfigValues(cfg)) values[k] = v;
  for (const char* k : kMustMatch) key += std::string(k) + "=" + values[k] + ";";
  key += fmt::format("tokenizer={};train_tokens={};train_windows={}", data.tokenizer, data.train_tokens,
                     data.train_windows);
  return ckpt::Xxh3Hex(key);
}

Status CopyModelState(const Gpt& model, ckpt::Snapshot* snap, int rank, int world) {
  const size_t n = model.num_params();
  if (world == 1 && model.optimizer_shard().count != model.trainable().count)
    return Status::Internal("the model holds a shard of the AdamW moments but saves as a world of one");
  EnsureImages(model, snap, world > 1 ? OptimizerShardName(rank, world) : kOptimizer);
  model.backend()->Download(snap->images[0].second->data(), model.params(), n * 4);
  DownloadMoments(model, snap->images[1].second.get());
  return Status::Ok();
}

std::string OptimizerShardName(int rank, int world) {
  return fmt::format("optimizer-{:05d}-of-{:05d}.safetensors", rank, world);
}

std::optional<std::pair<int, int>> ParseOptimizerShardName(const std::string& name) {
  int rank = -1, world = -1, used = 0;
  if (std::sscanf(name.c_str(), "optimizer-%5d-of-%5d.safetensors%n", &rank, &world, &used) != 2 ||
      used != static_cast<int>(name.size()) || world < 1 || rank < 0 || rank >= world ||
      name != OptimizerShardName(rank, world))
    return std::nullopt;
  return std::make_pair(rank, world);
}

void FillOptimizerShard(const Gpt& model, std::unique_ptr<ckpt::SafetensorsImage>* image) {
  if (!*image || (*image)->data_bytes() != 2 * model.optimizer_shard().count * 4)
    *image = MomentsImage(model, true);
  DownloadMoments(model, image->get());
}

GradRange TrainableShard(GradRange trainable, int world, int rank) {
  const dist::Shard sh = dist::ShardOf(trainable.count, world, rank);
  return {trainable.offset + sh.offset, sh.count};
}

ckpt::FileFilter ResumeFiles(GradRange trainable, GradRange mine) {
  return [trainable, mine](const std::string& name) {
    auto rw = ParseOptimizerShardName(name);
    if (!rw) return true;
    const GradRange sh = TrainableShard(trainable, rw->second, rw->first);
    return sh.offset < mine.offset + mine.count && mine.offset < sh.offset + sh.count;
  };
}

Status CaptureTrainMeta(const Gpt& model, const TrainConfig& cfg, const DataIdentity& data,
                        const TrainProgress& p, ckpt::Snapshot* snap) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const auto& [k, v] : TrainConfigValues(cfg)) config[k] = v;
  const LrSchedule sched = cfg.lr_schedule();
  nlohmann::ordered_json j;
  j["format"] = "tern-trainer-state";
  j["version"] = 1;
  j["step"] = p.step;
  j["adam_t"] = p.adam_t >= 0 ? p.adam_t : p.step;  // AdamW's bias-correction step of the last update
  j["tokens_seen"] = p.tokens_seen;
  j["train_seconds"] = p.train_seconds;
  j["loader"] = {{"epoch", p.loader.epoch},
                 {"index", p.loader.index},
                 {"batch_size", cfg.batch_size},
                 {"seq_len", cfg.seq_len},
                 {"shuffle", true}};
  j["data"] = {{"train_tokens", data.train_tokens}, {"train_windows", data.train_windows}};
  if (!data.content.empty()) j["data"]["content"] = data.content;
  // Every random stream of the trainer is a pure function of the seed and a counter stored above.
  j["rng"] = {{"seed", cfg.seed},
              {"weights", "GptInitialWeights(seed); used only before step 1"},
              {"data_order", "mt19937_64 per epoch from (seed, epoch); position = loader.epoch/index"},
              {"sampling", "seed + 1000 + i for the i-th sample of each call"}};
  j["lr_schedule"] = {{"step", p.step},
                      {"next_lr", sched.At(p.step)},
                      {"kind", LrScheduleName(cfg.schedule)},
                      {"warmup_steps", cfg.warmup_steps},
                      {"total_steps", cfg.steps}};
  if (p.loss_scale) {
    j["loss_scale"] = {{"scale", p.loss_scale->scale},
                       {"good_steps", p.loss_scale->good_steps},
                       {"skipped_steps", p.loss_scale->skipped_steps}};
  } else {
    j["loss_scale"] = nullptr;
  }
  j["precision"] = PrecisionName(cfg.precision);
  j["tokenizer"] = data.tokenizer;
  j["config_fingerprint"] = ResumeFingerprint(cfg, data);
  j["config"] = config;
  j["config_yaml"] = TrainConfigToYaml(cfg);
  snap->small_files["trainer.json"] = j.dump(2) + "\n";

  snap->manifest.config_fingerprint = ResumeFingerprint(cfg, data);
  snap->manifest.tokenizer = data.tokenizer;
  snap->manifest.extra = {{"model", cfg.model.ToString()},
                          {"precision", PrecisionName(cfg.precision)},
                          {"params", model.num_params()},
                          {"tokens_seen", p.tokens_seen}};
  return Status::Ok();
}

Result<RestoredTrain> RestoreTrainState(const ckpt::LoadedCheckpoint& ck, const TrainConfig& cfg,
                                        const DataIdentity& data, Gpt* model) {
  auto file = [&](const char* name) -> Result<const std::string*> {
    auto it = ck.files.find(name);
    if (it == ck.files.end()) return Status::Corruption(fmt::format("{} has no {}", ck.location, name));
    return &it->second;
  };
  TERN_ASSIGN_OR_RETURN(const std::string* trainer_text, file(kTrainer));
  TERN_ASSIGN_OR_RETURN(SavedTrainerState state, ParseTrainerState(*trainer_text, ck.location));

  // What changed since the checkpoint: refuse what breaks resume, report the rest.
  std::vector<std::string> refused;
  RestoredTrain out;
  for (const auto& [k, now] : TrainConfigValues(cfg)) {
    // Not configuration: where to resume from, and what `tern run` sets for each attempt.
    auto saved = state.config.find(k);
    if (saved == state.config.end() || k == "ckpt.resume" || k == "run.cost_offset_usd" ||
        k == "run.billing_start_unix" || k == "train.lora.rank" || k == "train.lora.targets")
      continue;
    const std::string& then = saved->second;
    if (then == now) continue;
    const bool must = std::find(std::begin(kMustMatch), std::end(kMustMatch), k) != std::end(kMustMatch);
    (must ? refused : out.changes).push_back(fmt::format("{}: {} -> {}", k, then, now));
  }
  // LoRA or not, and which adapters, is the saved tensors' layout (a checkpoint from before LoRA has none).
  auto saved_or = [&](const char* key, const std::string& dflt) {
    auto it = state.config.find(key);
    return it == state.config.end() ? dflt : it->second;
  };
  const std::string rank_then = saved_or("train.lora.rank", "0"), rank_now = std::to_string(cfg.lora.rank);
  const std::string targets_then = saved_or("train.lora.targets", LoraTargetNames(kLoraAllTargets)),
                    targets_now = LoraTargetNames(cfg.lora.targets);
  if (rank_then != rank_now)
    refused.push_back(fmt::format("train.lora.rank: {} -> {} (the checkpoint holds {})", rank_then, rank_now,
                                  rank_then == "0" ? "no adapters" : "adapters of rank " + rank_then));
  else if (cfg.lora.enabled() && targets_then != targets_now)
    refused.push_back(fmt::format("train.lora.targets: {} -> {}", targets_then, targets_now));
  if (state.tokenizer != data.tokenizer)
    refused.push_back(fmt::format("tokenizer: {} -> {}", state.tokenizer, data.tokenizer));
  if (state.train_tokens != data.train_tokens || state.train_windows != data.train_windows) {
    refused.push_back(
        fmt::format("training data: {} tokens -> {} tokens", state.train_tokens, data.train_tokens));
  } else if (!state.train_content.empty() && !data.content.empty() && state.train_content != data.content) {
    // As many tokens, other tokens: the dataset was re-prepared in place or its files replaced.
    refused.push_back(fmt::format(
        "training data content: {} -> {} (as many tokens, different ones: data.dir was re-prepared or its "
        "shards replaced since the checkpoint)",
        state.train_content, data.content));
  }
  if (!refused.empty()) {
    return Status::InvalidArgument(fmt::format(
        "cannot resume from {}: these changes break resume:\n    {}\n  restore them, or start a new run "
        "(another run.dir, or ckpt.resume=none)",
        ck.location, fmt::join(refused, "\n    ")));
  }

  TERN_ASSIGN_OR_RETURN(const std::string* tensors_bytes, file(kTensors));
  TERN_ASSIGN_OR_RETURN(auto tensors, ckpt::ParseSafetensors(*tensors_bytes));
  std::vector<float> params(model->num_params());
  for (const auto& t : model->layout()) {
    auto it = tensors.tensors.find(t.name);
    if (it == tensors.tensors.end() || it->second.shape != t.shape || it->second.dtype != "F32") {
      return Status::Corruption(fmt::format("{}/tensors.safetensors: tensor {} missing or not F32 {}",
                                            ck.location, t.name, fmt::join(t.shape, "x")));
    }
    std::memcpy(params.data() + t.offset, it->second.data.data(), t.numel * 4);
  }
  model->SetParameters(params);  // also re-derives the bf16 copy
  TERN_RETURN_IF_ERROR(RestoreMoments(ck, model));
  model->backend()->Synchronize();

  out.progress = state.progress;
  return out;
}

ckpt::ManagerOptions CheckpointManagerOptions(const TrainConfig& cfg) {
  const CheckpointConfig& c = cfg.ckpt;
  ckpt::ManagerOptions o;
  o.tiers.push_back({"fast",
                     c.dir.empty() ? cfg.run_dir + "/checkpoints" : c.dir,
                     c.every,
                     {c.keep_last, c.keep_every, 0}});
  if (!c.durable.empty()) {
    o.tiers.push_back({"durable", c.durable, c.durable_every, {c.durable_keep_last, c.keep_every, 0}});
  }
  if (c.best_k > 0) {
    o.tiers.push_back({"best", c.best_dir.empty() ? cfg.run_dir + "/best" : c.best_dir, 0, {1, 0, c.best_k}});
  }
  o.async = c.async;
  o.skip_when_busy = c.when_busy == WhenBusy::kSkip;
  o.s3.endpoint = c.s3_endpoint;
  o.s3.region = c.s3_region;
  o.s3.part_size = static_cast<uint64_t>(c.s3_part_mb) << 20;
  o.s3.multipart_threshold = o.s3.part_size;
  return o;
}

double ProcessAgeSeconds() {
  std::ifstream stat("/proc/self/stat"), up("/proc/uptime");
  std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  double uptime = 0;
  up >> uptime;
  const size_t paren = s.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos || uptime <= 0) return 0;
  std::istringstream rest(s.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; i++) {
    if (i == 22) return uptime - std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return 0;
}

}  // namespace tern
