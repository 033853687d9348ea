// The data half of the Trainer: data.dir's train and val loaders, data.mix's datasets mixed into the
// training windows, and the validation losses over them.
#include <fmt/format.h>

#include "core/progress.h"
#include "train/remote_data.h"
#include "train/trainer.h"

namespace tern {

// Every rank makes (or finds) the copy: ranks sharing a machine take the cache's lock in turn, so the data is
// fetched once per machine; a rank on another machine fetches its own.
Status Trainer::MirrorRemoteData() {
  std::vector<std::string> dirs = {cfg_.data_dir};
  if (auto mix = ParseDataMix(cfg_.data_mix, cfg_.data_dir); mix.ok())  // a bad mixture fails in OpenLoaders
    for (const DataMixEntry& e : *mix) dirs.push_back(e.dir);
  const DataMirrorOptions o = DataMirrorOptionsFor(cfg_, quiet_ ? nullptr : stderr);
  for (const std::string& dir : dirs) {
    if (!IsRemoteData(dir) || local_data_.count(dir)) continue;
    auto m = MirrorPreparedData(dir, o);
    if (!m.ok()) return m.status().WithContext("data.dir " + dir);
    local_data_[dir] = m->local_dir;
    data_fetch_s_ += m->seconds;
    data_fetch_bytes_ += m->fetched_bytes;
    if (!quiet_)
      std::fprintf(
          stderr, "tern train: data %s: %s\n", dir.c_str(),
          m->fetched == 0
              ? fmt::format("the verified copy in {} ({}, {:.2f} s)", m->local_dir,
                            ProgressBar::FormatAmount(static_cast<double>(m->bytes), "B"), m->seconds)
                    .c_str()
              : fmt::format("{} of {} files fetched ({}) in {:.1f} s, verified, into {}", m->fetched,
                            m->files, ProgressBar::FormatAmount(static_cast<double>(m->fetched_bytes), "B"),
                            m->seconds, m->local_dir)
                    .c_str());
  }
  return Status::Ok();
}

const std::string& Trainer::LocalData(const std::string& dir) const {
  const auto it = local_data_.find(dir);
  return it == local_data_.end() ? dir : it->second;
}

// Data parallel: each rank reads its run of every step's micro-batches, and every world()-th validation
// batch. A mixture's sources must have been encoded by data.dir's tokenizer: the same ids, the same text.
Status Trainer::OpenLoaders(const std::string& dir) {
  TERN_ASSIGN_OR_RETURN(auto train_shards, FindShards(LocalData(dir), "train"));
  TERN_ASSIGN_OR_RETURN(auto val_shards, FindShards(LocalData(dir), "val"));
  TERN_ASSIGN_OR_RETURN(const std::vector<DataMixEntry> mix, ParseDataMix(cfg_.data_mix, dir));
  const int W = world(), r = rank();
  const DataSlice train_slice{r, W, std::max(1, cfg_.grad_accum_steps() / W)}, val_slice{r, W, 1};
  double rest = 1;
  for (const DataMixEntry& e : mix) rest -= e.share;
  std::vector<MixSource> sources = {{train_shards, rest}};
  mix_val_.clear();
  for (const DataMixEntry& e : mix) {
    auto tok = Tokenizer::Load(LocalData(e.dir) + "/tokenizer.model");
    if (!tok.ok()) return tok.status().WithContext(fmt::format("data.mix {}", e.dir));
    if (tok->fingerprint() != tokenizer_->fingerprint())
      return Status::InvalidArgument(fmt::format(
          "data.mix {} was prepared with another tokenizer than data.dir {} ({} vs {}): the same ids would "
          "mean other text. Prepare it again with data.dir's: tern prepare --input TEXT --out {} --tokenizer "
          "{} --force",
          e.dir, dir, tok->fingerprint(), tokenizer_->fingerprint(), e.dir, dir));
    TERN_ASSIGN_OR_RETURN(auto shards, FindShards(LocalData(e.dir), "train"));
    TERN_ASSIGN_OR_RETURN(auto val, FindShards(LocalData(e.dir), "val"));
    sources.push_back({shards, e.share});
    TERN_ASSIGN_OR_RETURN(
        auto loader, DataLoader::Open(val, cfg_.batch_size, cfg_.seq_len, cfg_.seed, false, 2, val_slice));
    mix_val_.emplace_back(e.dir, std::move(loader));
  }
  TERN_ASSIGN_OR_RETURN(train_loader_, DataLoader::OpenMix(sources, cfg_.batch_size, cfg_.seq_len, cfg_.seed,
                                                           true, 4, train_slice));
  TERN_ASSIGN_OR_RETURN(val_loader_, DataLoader::Open(val_shards, cfg_.batch_size, cfg_.seq_len, cfg_.seed,
                                                      false, 4, val_slice));
  return Status::Ok();
}

std::string Trainer::DescribeMix() const {
  const DataLoader& dl = *train_loader_;
  // Windows the whole run draws: steps x micro-batches x B (the ranks together).
  const double run_windows = static_cast<double>(cfg_.steps) * cfg_.grad_accum_steps() * cfg_.batch_size;
  std::string out = "  data mix (train windows; epochs = passes over each dataset's windows in this run):\n";
  for (size_t s = 0; s < dl.num_sources(); ++s) {
    const std::string& name = s == 0 ? cfg_.data_dir : mix_val_[s - 1].first;
    const double epochs = dl.source_share(s) * run_windows / static_cast<double>(dl.source_windows(s));
    out += fmt::format("    {:5.1f}%  {}  ({}, {:.2f} epochs){}\n", dl.source_share(s) * 100, name,
                       ProgressBar::FormatAmount(static_cast<double>(dl.source_tokens(s)), "tokens"), epochs,
                       epochs > 4 ? "  repeated many times: lower its share or add text" : "");
  }
  return out;
}

// With W ranks, rank r evaluates batches r, r + W, ... of the same eval_batches, and the sums are added.
// With loss masks, the mean over the tokens learned: each batch's mean times B*T, over the count.
Result<double> Trainer::EvaluateOn(DataLoader* loader) {
  TERN_RETURN_IF_ERROR(loader->Reset());
  Batch batch;
  double sum = 0, learned = 0;
  const bool masked = loader->has_masks();
  const double N = static_cast<double>(cfg_.batch_size) * cfg_.seq_len;
  const int W = world(), mine = cfg_.eval_batches / W + (rank() < cfg_.eval_batches % W ? 1 : 0);
  for (int i = 0; i < mine; i++) {
    TERN_RETURN_IF_ERROR(loader->Next(&batch));
    const double loss =
        model_->Forward(batch.inputs.data(), batch.targets.data(), cfg_.batch_size, cfg_.seq_len);
    if (masked) {
      sum += loss * N;
      learned += static_cast<double>(LearnedTargets(batch.targets));
    } else {
      sum += loss;
    }
  }
  if (W > 1) {
    Result<double> total = comm_->SumInRankOrder(sum);
    if (!total.ok()) return total.status().WithContext("summing the validation loss");
    sum = total.value();
    if (masked) {
      Result<double> count = comm_->SumInRankOrder(learned);
      if (!count.ok()) return count.status().WithContext("summing the validation tokens");
      learned = count.value();
    }
  }
  if (masked) return learned > 0 ? sum / learned : 0.0;
  return sum / cfg_.eval_batches;
}

Result<double> Trainer::Evaluate() {
  return EvaluateOn(val_loader_.get());
}

Result<std::vector<std::pair<std::string, double>>> Trainer::EvaluateMix() {
  std::vector<std::pair<std::string, double>> out;
  for (auto& [dir, loader] : mix_val_) {
    auto loss = EvaluateOn(loader.get());
    if (!loss.ok()) return loss.status().WithContext(fmt::format("validating data.mix {}", dir));
    out.emplace_back(dir, *loss);
  }
  return out;
}

std::string Trainer::MixText(const std::vector<std::pair<std::string, double>>& losses) {
  std::string out;
  for (const auto& [dir, loss] : losses) out += fmt::format(" | {} val {:.4f}", dir, loss);
  return out;
}

}  // namespace tern
