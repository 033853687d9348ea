// The training config of the end-to-end tests: a GPT of 32 channels and 2 heads on the shared small corpus
// (testing/prepared_data.h), seconds to train on one thread. Each test states only what it changes:
//
//   WriteFile(root + "/tiny.yaml", TinyTrainYaml(data, {.n_layer = 2, .steps = 30, .lr = "3.0e-3",
//                                                        .more = "ckpt: {every: 10}\n"}));
//
// An unset optional key is left out, so the trainer's default applies (as it would for a user).
#pragma once

#include <optional>
#include <string>

namespace tern::testing {

struct TinyTrain {  // designated initializers name the fields in this order
  int n_layer = 1;
  int batch_size = 4, seq_len = 32;
  std::optional<int> total_batch_tokens;
  int steps = 10;
  std::optional<int> warmup_steps;
  std::string lr;        // "" = the default
  std::string schedule;  // "" = the default
  int eval_every = 0, eval_batches = 2;
  std::string run_dir;  // "" = the config's default
  std::string more;     // further YAML (ckpt:, job: ...), each line ending in "\n"
};

inline std::string TinyTrainYaml(const std::string& data_dir, const TinyTrain& t) {
  auto n = [](int v) { return std::to_string(v); };
  std::string train = "batch_size: " + n(t.batch_size) + ", seq_len: " + n(t.seq_len);
  if (t.total_batch_tokens) train += ", total_batch_tokens: " + n(*t.total_batch_tokens);
  train += ", steps: " + n(t.steps);
  if (!t.lr.empty()) train += ", lr: " + t.lr;
  if (t.warmup_steps) train += ", warmup_steps: " + n(*t.warmup_steps);
  if (!t.schedule.empty()) train += ", schedule: " + t.schedule;
  std::string run = "peak_gflops: 100";
  if (!t.run_dir.empty()) run += ", dir: " + t.run_dir;
  return "model: {n_layer: " + n(t.n_layer) + ", n_head: 2, n_embd: 32, vocab_size: 0, block_size: 32}\n" +
         "data: {dir: " + data_dir + "}\n" + "train: {" + train + "}\n" + "eval: {every: " + n(t.eval_every) +
         ", batches: " + n(t.eval_batches) + "}\n" + "sample: {count: 0}\n" + "run: {" + run + "}\n" + t.more;
}

}  // namespace tern::testing
