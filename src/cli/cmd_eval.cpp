// tern eval MODEL: the validation loss of a trained model on token shards, the log-probabilities of a
// prompt set and the accuracy on a multiple-choice set (infer/evaluate.h), through the serving forward with
// the weights it would serve. For a run directory the defaults are the trainer's: its data, its T and its
// eval_batches * batch_size windows, so the loss printed is the val_loss the run logged last.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/command.h"
#include "core/progress.h"
#include "data/loader.h"
#include "infer/evaluate.h"
#include "infer/weights.h"
#include "registry/model_uri.h"
#include "train/remote_data.h"
#include "train/train_config.h"

namespace tern::cli {
namespace {

struct EvalCmdOptions {
  std::string model, data, split = "val", prompts, choices, device = "cpu", weights = "fp32", quantize;
  int seq_len = 0;
  int64_t windows = -1;  // -1: the run's eval windows, else all
  bool json = false, quiet = false;
};

int Fail(const Status& st) {
  std::fprintf(stderr, "tern eval: %s\n", st.message().c_str());
  return 1;
}

// One prompt per line; empty lines are skipped.
Result<std::vector<std::string>> ReadPrompts(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return Status::NotFound("cannot read --prompts " + path + ": give a text file, one prompt per line");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  if (out.empty()) return Status::InvalidArgument("--prompts " + path + " holds no prompt");
  return out;
}

int RunEval(EvalCmdOptions o) {
  auto model_path = registry::ResolveModelUri(o.model);  // models:/NAME@ALIAS -> a local directory
  if (!model_path.ok()) return Fail(model_path.status());
  auto weights = LoadModelWeights(*model_path);
  if (!weights.ok()) return Fail(weights.status());
  // A run directory's training config gives the defaults.
  TrainConfig train;
  const std::string config = (std::filesystem::path(*model_path) / "config.yaml").string();
  const bool have_config = std::filesystem::exists(config) && LoadTrainConfigFile(config, &train).ok();
  const bool data_from_config = o.data.empty() && have_config;
  if (data_from_config) o.data = train.data_dir;
  // With --prompts or --choices, a model whose data is not here is still scored on them (no loss).
  const bool other_scores = !o.prompts.empty() || !o.choices.empty();
  std::error_code ec;
  const bool skip_loss =
      other_scores &&
      (o.data.empty() || (data_from_config && !IsRemoteData(o.data) && !std::filesystem::exists(o.data, ec)));
  if (o.data.empty() && !skip_loss)
    return Fail(
        Status::InvalidArgument("no --data: give the directory `tern prepare` wrote (its val_*.bin)"));
  if (o.seq_len == 0 && have_config) o.seq_len = std::min(train.seq_len, weights->config.block_size);
  if (o.windows < 0)
    o.windows = have_config ? static_cast<int64_t>(train.eval_batches) * train.batch_size : 0;

  auto backend = MakeBackend(o.device);
  if (!backend.ok()) return Fail(backend.status());
  auto quantize = o.quantize.empty() ? ParseWeights(o.weights) : ParseQuantize(o.quantize);
  if (!quantize.ok()) return Fail(quantize.status());
  std::optional<EvalResult> r;
  if (skip_loss) {
    std::fprintf(
        stderr, "tern eval: no loss: %s (--data DIR scores one)\n",
        o.data.empty() ? "no data directory" : ("the run's data.dir " + o.data + " is not here").c_str());
  } else {
    auto local = LocalDataDir(o.data, DataMirrorOptionsFor(train));  // s3://: this machine's verified copy
    if (!local.ok()) return Fail(local.status());
    auto shards = FindShards(*local, o.split);
    if (!shards.ok())
      return Fail(shards.status().WithContext(data_from_config
                                                  ? "the run's data.dir " + o.data +
                                                        " (--data DIR evaluates on another), split " + o.split
                                                  : "--data " + o.data + " --split " + o.split));
    EvalOptions eo;
    eo.seq_len = o.seq_len;
    eo.max_windows = o.windows;
    eo.quantize = *quantize;
    auto loss = EvaluateShards(backend->get(), weights->config, weights->params, *shards, eo);
    if (!loss.ok()) return Fail(loss.status());
    r = *loss;
  }

  std::optional<Tokenizer> tok;
  if (other_scores) {
    auto t = Tokenizer::Load(weights->tokenizer_path);
    if (!t.ok()) return Fail(t.status());
    tok = std::move(t).value();
  }
  std::vector<PromptScore> scores;
  if (!o.prompts.empty()) {
    auto prompts = ReadPrompts(o.prompts);
    if (!prompts.ok()) return Fail(prompts.status());
    auto s = ScorePrompts(backend->get(), weights->config, weights->params, *tok, *prompts, *quantize);
    if (!s.ok()) return Fail(s.status());
    scores = std::move(s).value();
  }
  std::optional<ChoiceResult> choices;
  if (!o.choices.empty()) {
    auto items = LoadChoiceItems(o.choices);
    if (!items.ok()) return Fail(items.status());
    ProgressBar bar("choices", items->size(), "items", o.quiet ? nullptr : stderr);
    auto c = ScoreChoices(backend->get(), weights->config, weights->params, *tok, *items, *quantize,
                          [&](int64_t done, int64_t correct) {
                            bar.Update(static_cast<uint64_t>(done),
                                       fmt::format("acc {:.4f}", static_cast<double>(correct) / done));
                          });
    if (!c.ok()) return Fail(c.status());
    bar.Finish(fmt::format("acc {:.4f}", c->acc()));
    choices = std::move(c).value();
  }

  const int T = o.seq_len > 0 ? o.seq_len : weights->config.block_size;
  if (o.json) {
    nlohmann::json j = {{"model", o.model}, {"weights", WeightsName(*quantize)}};
    if (r) {
      j.update({{"data", o.data},
                {"split", o.split},
                {"seq_len", T},
                {"windows", r->windows},
                {"tokens", r->tokens},
                {"loss", r->loss},
                {"perplexity", r->perplexity()}});
    }
    j["prompts"] = nlohmann::json::array();
    for (const auto& s : scores)
      j["prompts"].push_back(
          {{"text", s.text}, {"tokens", s.tokens}, {"logprob", s.logprob}, {"mean", s.mean()}});
    if (choices) {
      j["choices"] = {{"file", o.choices},
                      {"items", choices->items},
                      {"acc", choices->acc()},
                      {"acc_stderr", choices->StdErr(choices->acc())},
                      {"acc_norm", choices->acc_norm()},
                      {"acc_norm_stderr", choices->StdErr(choices->acc_norm())},
                      {"truncated", choices->truncated}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (r) {
    std::printf("%s on %s/%s_*.bin: loss %.4f (perplexity %.2f) over %lld windows of %d tokens\n",
                o.model.c_str(), o.data.c_str(), o.split.c_str(), r->loss, r->perplexity(),
                static_cast<long long>(r->windows), T);
  }
  for (const auto& s : scores)
    std::printf("  %9.3f  (%6.3f per token, %3d tokens)  %s\n", s.logprob, s.mean(), s.tokens,
                s.text.c_str());
  if (choices) {
    const std::string cut =
        choices->truncated ? fmt::format(" ({} contexts cut to the model's window)", choices->truncated) : "";
    std::printf("%s on %s: acc %.4f +- %.4f, acc_norm %.4f +- %.4f over %lld items%s\n", o.model.c_str(),
                o.choices.c_str(), choices->acc(), choices->StdErr(choices->acc()), choices->acc_norm(),
                choices->StdErr(choices->acc_norm()), static_cast<long long>(choices->items), cut.c_str());
  }
  return 0;
}

}  // namespace

void AddEvalCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<EvalCmdOptions>();
  auto* sub = root.add_subcommand(
      "eval", "Validation loss, prompt log-probabilities and multiple-choice accuracy of a trained model");
  sub->footer(
      "\nExamples:\n  tern eval runs/demo                      # the run's own data and eval windows: its "
      "last "
      "val_loss\n"
      "  tern eval runs/demo --data data/other --windows 0 --prompts prompts.txt --json\n"
      "  tern eval models:/mine@production --choices hellaswag_val.jsonl   # accuracy, as lm-eval scores it\n"
      "The forward is the server's (infer/), with the weights it would serve: --weights bf16|int8|int4 "
      "measures "
      "what "
      "they cost in quality.");
  sub->add_option("model", o->model,
                  "run directory written by `tern train`, a checkpoint, or models:/NAME@ALIAS")
      ->required();
  sub->add_option("--data", o->data, "directory written by `tern prepare` (default: the run's data)");
  sub->add_option("--split", o->split, "shards to read: SPLIT_*.bin (val or train)");
  sub->add_option("--seq-len", o->seq_len, "tokens per window (default: the run's seq_len, else the context)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--windows", o->windows,
                  "windows to score, in order; 0 = all (default: the run's eval_batches x batch_size)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--prompts", o->prompts, "text file, one prompt per line: each one's log-probability");
  sub->add_option("--choices", o->choices,
                  "JSON Lines multiple-choice set ({\"ctx\", \"endings\": [..], \"label\"} per line, "
                  "HellaSwag's files as they are): acc and acc_norm (docs/mlops.md)");
  sub->add_option("--device", o->device, "cpu | cpu-ref | cuda | auto");
  auto* weights = sub->add_option("--weights", o->weights,
                                  "fp32 | bf16 | int8 | int4 matmul weights, as tern serve would use them");
  sub->add_option("--quantize", o->quantize, "the older name of --weights: none (= fp32) | int8")
      ->excludes(weights);
  sub->add_flag("--json", o->json, "print JSON (loss, perplexity, windows, prompts, choices)");
  sub->add_flag("--quiet", o->quiet, "no progress line on stderr");
  table.Add(sub, [o] { return RunEval(*o); });
}

}  // namespace tern::cli
