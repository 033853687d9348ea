// Data-parallel training with real ranks: `mpirun -np 2 tern train` against one process with the same global
// batch (fp32, bf16, ZeRO-1), resume at the same and at another world size, a notice to one rank, and a hung
// rank. Each case runs the built `tern` binary with one OpenMP thread per rank (2 ranks on 2 cores).
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/format.h"
#include "ckpt/preemption.h"
#include "model/safetensors.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tern_binary.h"
#include "train/remote_data.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class DistTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary().string();
    mpirun_ = testing::FindProgram("mpirun");
    if (tern_.empty() || mpirun_.empty()) TERN_SKIP_OR_FAIL_IN_CI("needs the tern binary and mpirun");
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
    config_ = root() / "dist.yaml";
    std::ofstream(config_)
        << "model: {n_layer: 2, n_head: 2, n_embd: 32, block_size: 32}\n"
        << "data: {dir: " << data_ << "}\n"
        << "train: {batch_size: 4, seq_len: 32, total_batch_tokens: 256, steps: 8, lr: 0.003,\n"
        << "        warmup_steps: 2, device: cpu}\n"
        << "eval: {every: 4, batches: 3}\n"
        << "sample: {count: 0}\n"
        << "run: {peak_gflops: 100}\n";
  }

  // `tern train` with `ranks` processes (1: no launcher); the exit code and output.
  testing::CommandResult Train(int ranks, const std::string& run, const std::string& sets = "") {
    std::string cmd = "OMP_NUM_THREADS=1 ";
    if (ranks > 1)
      cmd += mpirun_ + " --allow-run-as-root --oversubscribe --tag-output -np " + std::to_string(ranks) + " ";
    cmd += tern_ + " train " + config_.string() + " --quiet --set run.dir=" + (root() / run).string() + " " +
           sets;
    return testing::RunCommand(cmd);
  }

  std::map<int, double> Rows(const std::string& run, const char* key) {
    std::map<int, double> out;
    std::ifstream in(root() / run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && !j.contains("event") && j.contains(key))
        out[j["step"].get<int>()] = j[key].get<double>();
    }
    return out;
  }
  std::vector<float> Weights(const std::string& run) {
    auto w = ReadGptSafetensors((root() / run / "model.safetensors").string());
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? w->params : std::vector<float>{};
  }
  // Largest |a - b| / max(|a|, |b|, floor) over matching steps (all steps of `a` must be in `b`).
  static double MaxRel(const std::map<int, double>& a, const std::map<int, double>& b, double floor = 1e-12) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (const auto& [step, x] : a) {
      auto it = b.find(step);
      if (it == b.end()) return INFINITY;
      worst =
          std::max(worst, std::abs(x - it->second) / std::max({std::abs(x), std::abs(it->second), floor}));
    }
    return worst;
  }
  static double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); i++)
      worst = std::max<double>(worst, std::abs(a[i] - b[i]));
    return worst;
  }

  fs::path root() const { return fs::path(dir_.path()); }

  testing::TempDir dir_;
  std::string tern_, mpirun_, data_;
  fs::path config_;
};

// eval.choices with 2 ranks: each scores its share of the items and the counts are summed, so every item is
// counted once (7 items: the accuracy is a multiple of 1/7) and the job's accuracy is the one process's.
TEST_F(DistTrainTest, EvalChoicesSplitAcrossRanksGiveTheOneProcessAccuracy) {
  {
    std::ofstream f(root() / "choices.jsonl");
    for (int i = 0; i < 7; i++)
      f << R"({"ctx": "Verse )" << 10 + i
        << R"(:", "endings": ["light and darkness.", "Qzx vjk Zqx jvq zq."], )"
        << R"("label": 0})"
        << "\n";
  }
  const std::string sets = "--set eval.choices=" + (root() / "choices.jsonl").string();
  auto one = Train(1, "c1", sets);
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = Train(2, "c2", sets);
  ASSERT_EQ(two.code, 0) << two.output;
  const auto a = Rows("c1", "choice_acc"), b = Rows("c2", "choice_acc");
  ASSERT_EQ(a.size(), 2u) << "steps 4 and 8";
  ASSERT_EQ(b.size(), 2u);
  for (const auto& [step, acc] : b) {
    EXPECT_NEAR(acc * 7, std::round(acc * 7), 1e-9) << "step " << step << ": each item counted once";
    EXPECT_DOUBLE_EQ(acc, a.at(step)) << "step " << step;
  }
}

// 2 ranks x 1 micro-batch = 1 process x 2 micro-batches: the same data in the same order, so every step's
// loss agrees to float rounding (the sums over micro-batches are added in another order), and so do the
// weights.
TEST_F(DistTrainTest, TwoRanksMatchOneProcessWithTheSameGlobalBatch) {
  auto one = Train(1, "one");
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = Train(2, "two");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_LT(MaxRel(Rows("one", "loss"), Rows("two", "loss")), 1e-6);
  EXPECT_LT(MaxRel(Rows("one", "val_loss"), Rows("two", "val_loss")), 1e-6);
  EXPECT_LT(MaxAbs(Weights("one"), Weights("two")), 1e-5) << "final weights (|w| ~ 0.02 .. 1)";
  // Rank 0 alone writes, and its rows describe the job: comm time, the slowest and fastest rank.
  std::ifstream in(root() / "two" / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  auto start = nlohmann::json::parse(line);
  EXPECT_EQ(start["world"], 2);
  EXPECT_EQ(start["dist"], "mpi");
  EXPECT_EQ(Rows("two", "comm_ms").size(), 8u);
  EXPECT_EQ(Rows("two", "step_ms_max").size(), 8u);
  for (const auto& [step, lo] : Rows("two", "step_ms_min")) EXPECT_LE(lo, Rows("two", "step_ms_max")[step]);
  EXPECT_TRUE(Rows("one", "step_ms_max").empty()) << "one rank: no per-rank spread";
}

// data.dir on S3 with 2 ranks on one machine: the ranks take the cache's lock in turn, so the data is
// fetched once into one verified copy, and pass the start barrier (dist.start_timeout_s); the job trains as
// one process on the local directory does.
TEST_F(DistTrainTest, TwoRanksFetchS3DataOnceAndMatchOneProcess) {
  auto moto = testing::StartMoto("dist");
  if (!moto->skip_reason.empty()) TERN_SKIP_OR_FAIL_IN_CI("no S3 server: " << moto->skip_reason);
  ::setenv("AWS_ACCESS_KEY_ID", moto->key_id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", moto->secret.c_str(), 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  auto pub = PublishPreparedData(data_, "s3://dist/small", false, {.endpoint = moto->endpoint}, nullptr);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  auto one = Train(1, "one");
  ASSERT_EQ(one.code, 0) << one.output;
  const fs::path cache = root() / "cache";
  auto two = Train(2, "two",
                   "--set data.dir=s3://dist/small --set ckpt.s3_endpoint=" + moto->endpoint +
                       " --set data.cache_dir=" + cache.string());
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_LT(MaxRel(Rows("one", "loss"), Rows("two", "loss")), 1e-6);
  std::vector<std::string> copies;
  for (const auto& e : fs::directory_iterator(cache / "s3/dist/small"))
    if (e.is_directory()) copies.push_back(e.path().filename().string());
  ASSERT_EQ(copies.size(), 1u) << "one verified copy, no .partial left";
  EXPECT_EQ(copies[0].find(".partial"), std::string::npos);
}

// data.mix with 2 ranks: the mixed stream is sliced like a single dataset's, so the ranks together train on
// the one process's windows, and each dataset's validation loss is the one process's.
TEST_F(DistTrainTest, AMixtureSplitsAcrossRanksLikeOneDataset) {
  testing::WriteFile(root() / "numbers.txt", testing::NumbersCorpus(40'000));
  ASSERT_TRUE(testing::PrepareWithTokenizerOf(data_, root() / "numbers.txt", root() / "numbers"));
  const std::string sets = "--set data.mix=" + (root() / "numbers").string() + ":0.4";
  auto one = Train(1, "m1", sets);
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = Train(2, "m2", sets);
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_LT(MaxRel(Rows("m1", "loss"), Rows("m2", "loss")), 1e-6);
  EXPECT_LT(MaxRel(Rows("m1", "val_loss"), Rows("m2", "val_loss")), 1e-6);
  const auto mix = [&](const std::string& run) {
    auto s = nlohmann::json::parse(testing::ReadFile(root() / run / "summary.json"));
    return s["val_loss_mix"][(root() / "numbers").string()].get<double>();
  };
  EXPECT_NEAR(mix("m1"), mix("m2"), 1e-6 * mix("m1"));
}

// Chat data (loss masks): each micro-batch's loss is its mean over the tokens learned, on whichever rank
// reads it, so 2 ranks give the one process's losses; the validation loss sums the learned tokens' counts.
TEST_F(DistTrainTest, LossMasksGiveTheOneProcessLosses) {
  std::string lines;
  for (int i = 0; i < 60; i++)
    lines += R"({"messages": [{"role": "user", "content": "Verse )" + std::to_string(i) +
             R"(: light?"}, {"role": "assistant", "content": "waters and firmament"}]})" + "\n";
  testing::WriteFile(root() / "chats.jsonl", lines);
  ASSERT_TRUE(testing::PrepareChatWithTokenizerOf(data_, (root() / "chats.jsonl").string(),
                                                  (root() / "chat").string(), 0.2));
  const std::string sets = "--set data.dir=" + (root() / "chat").string();
  auto one = Train(1, "k1", sets);
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = Train(2, "k2", sets);
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_LT(MaxRel(Rows("k1", "loss"), Rows("k2", "loss")), 1e-6);
  EXPECT_LT(MaxRel(Rows("k1", "val_loss"), Rows("k2", "val_loss")), 1e-6);
}

TEST_F(DistTrainTest, Bf16TwoRanksMatchOneProcessWithinBf16Rounding) {
  auto one = Train(1, "one", "--set train.precision=bf16");
  ASSERT_EQ(one.code, 0) << one.output;
  auto two = Train(2, "two", "--set train.precision=bf16");
  ASSERT_EQ(two.code, 0) << two.output;
  // The bf16 copies are rounded from fp32 weights that differ in the last bits: the bound is bf16's.
  EXPECT_LT(MaxRel(Rows("one", "loss"), Rows("two", "loss")), 1e-3);
  EXPECT_LT(MaxAbs(Weights("one"), Weights("two")), 1e-3);
}

// ZeRO-1 changes where the AdamW update runs, not its arithmetic: its gradients are reduce-scattered (each
// rank receives the sums of its shard only, bucket by bucket, dist.bucket_mb small enough for several
// buckets) and the clipping norm comes from the shards' norms, yet the losses, norms and weights are the
// default path's. Clipping is on and active (0.1 < every step's norm here), so the sharded norm is what
// scales the update. Unbucketed all-reduce (bucket_mb=0) gives the bucketed path's gradients bit for bit (the
// same sums, in other pieces), and so does the unbucketed reduce-scatter.
TEST_F(DistTrainTest, ZeroOneAndUnbucketedMatchTheDefaultPath) {
  const std::string clip = "--set train.grad_clip=0.1 --set dist.bucket_mb=0.01 ";
  auto plain = Train(2, "plain", clip);
  ASSERT_EQ(plain.code, 0) << plain.output;
  auto zero = Train(2, "zero", clip + "--set dist.zero=1");
  ASSERT_EQ(zero.code, 0) << zero.output;
  auto whole = Train(2, "whole", "--set train.grad_clip=0.1 --set dist.bucket_mb=0");
  ASSERT_EQ(whole.code, 0) << whole.output;
  auto zero_whole =
      Train(2, "zero_whole", "--set train.grad_clip=0.1 --set dist.bucket_mb=0 --set dist.zero=1");
  ASSERT_EQ(zero_whole.code, 0) << zero_whole.output;
  EXPECT_LT(MaxRel(Rows("plain", "loss"), Rows("zero", "loss")), 1e-6);
  EXPECT_LT(MaxRel(Rows("plain", "grad_norm"), Rows("zero", "grad_norm")), 1e-12);
  for (const auto& [step, norm] : Rows("zero", "grad_norm")) EXPECT_GT(norm, 0.1) << "step " << step;
  EXPECT_EQ(Weights("plain"), Weights("zero"));
  EXPECT_EQ(Rows("zero", "loss"), Rows("zero_whole", "loss"));
  EXPECT_EQ(Weights("zero"), Weights("zero_whole"));
  EXPECT_EQ(Rows("plain", "loss"), Rows("whole", "loss"));
  EXPECT_EQ(Weights("plain"), Weights("whole"));
}

// LoRA (train.lora) over 2 ranks with ZeRO-1: only the adapters' gradients are reduced and only their moments
// sharded; the losses and the merged model are the one process's, and the shard files resume on one rank.
TEST_F(DistTrainTest, LoraTwoRanksZeroOneMatchOneProcessAndResumeOnOne) {
  auto base = Train(1, "base");
  ASSERT_EQ(base.code, 0) << base.output;
  const std::string lora = "--set train.init_from=" + (root() / "base").string() +
                           " --set train.lora.rank=4 --set train.lora.alpha=8 --set train.lr=0.01"
                           " --set train.schedule=constant --set eval.every=0 ";  // a cut at 4 = the same lr
  auto one = Train(1, "lora_one", lora);
  ASSERT_EQ(one.code, 0) << one.output;
  auto cut = Train(2, "lora_two", lora + "--set dist.zero=1 --set ckpt.every=4 --set train.steps=4");
  ASSERT_EQ(cut.code, 0) << cut.output;
  EXPECT_TRUE(fs::exists(root() / "lora_two/checkpoints" / ckpt::StepDirName(4) /
                         "optimizer-00001-of-00002.safetensors"));
  fs::copy(root() / "lora_two", root() / "lora_two_to_1", fs::copy_options::recursive);
  auto two = Train(2, "lora_two", lora + "--set dist.zero=1 --resume auto");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_LT(MaxRel(Rows("lora_one", "loss"), Rows("lora_two", "loss")), 1e-6);
  EXPECT_LT(MaxAbs(Weights("lora_one"), Weights("lora_two")), 1e-5) << "the merged models";
  EXPECT_GT(MaxAbs(Weights("base"), Weights("lora_two")), 1e-3) << "the adapters changed the model";
  auto to_one = Train(1, "lora_two_to_1", lora + "--resume auto");
  ASSERT_EQ(to_one.code, 0) << to_one.output;
  EXPECT_LT(MaxRel(Rows("lora_one", "loss"), Rows("lora_two_to_1", "loss")), 1e-6) << "2 -> 1";
  EXPECT_LT(MaxAbs(Weights("lora_one"), Weights("lora_two_to_1")), 1e-5);
}

// The process of `rank` of the training into run dir `run`, found through /proc (its command line names the
// run dir, its environment Open MPI's rank); -1 while it has not started.
pid_t FindRank(const std::string& run_dir, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline"), env(e.path() / "environ");
    std::string c((std::istreambuf_iterator<char>(cmd)), {}), v((std::istreambuf_iterator<char>(env)), {});
    const std::string argv0 = c.substr(0, c.find('\0'));  // the tern binary itself, not a shell or mpirun
    if (!argv0.ends_with("/tern") || c.find(run_dir) == std::string::npos) continue;
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + std::string(1, '\0');
    if (v.find(want) != std::string::npos ||
        (rank == 0 && v.find("OMPI_COMM_WORLD_RANK") == std::string::npos))
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Starts `tern train` (ranks processes), waits until step `at` is logged, sends `sig` to rank `victim`, and
// returns the exit code (-1 when the run never got there).
int TrainAndSignal(const std::string& cmd, const fs::path& run_dir, int at, int victim, int sig,
                   std::string* log) {
  const std::string log_path = (run_dir.parent_path() / (run_dir.filename().string() + ".log")).string();
  testing::Child child({"/bin/sh", "-c", cmd}, {}, log_path);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool sent = false;
  while (!sent && std::chrono::steady_clock::now() < deadline && child.Running()) {
    std::ifstream in(run_dir / "metrics.jsonl");
    std::string line;
    int last = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && !j.contains("event") && j.contains("loss")) last = j["step"].get<int>();
    }
    if (last >= at) {
      const pid_t pid = FindRank(run_dir.string(), victim);
      if (pid > 0) sent = ::kill(pid, sig) == 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int code = child.Wait();
  std::ifstream in(log_path);
  log->assign((std::istreambuf_iterator<char>(in)), {});
  return sent ? code : -1;
}

// A long run (constant LR, so that train.steps can change on resume without changing the schedule).
constexpr const char* kLong =
    " --set train.steps=100000 --set train.schedule=constant --set eval.every=0 --set ckpt.every=0";

int LastStep(const std::map<int, double>& rows) {
  return rows.empty() ? 0 : rows.rbegin()->first;
}

// SIGTERM to rank 1 only: the per-step vote stops both ranks after the same step; rank 0 saves it once and
// every rank exits 75. Resuming at 2 ranks is bit-exact against an uninterrupted 2-rank run; the same
// checkpoint resumed on 1 process continues within float rounding (elastic 2 -> 1), and a 1-process
// checkpoint resumed on 2 ranks likewise (1 -> 2).
TEST_F(DistTrainTest, NoticeToOneRankSavesOnceAndResumesAtAnyWorldSize) {
  std::string log;
  const std::string mpi = "OMP_NUM_THREADS=1 " + mpirun_ + " --allow-run-as-root --oversubscribe -np 2 ";
  const std::string cut_cmd = mpi + tern_ + " train " + config_.string() +
                              " --quiet --set run.dir=" + (root() / "cut").string() + kLong;
  const int code = TrainAndSignal(cut_cmd, root() / "cut", 3, /*victim=*/1, SIGTERM, &log);
  ASSERT_EQ(code, ckpt::kExitPreempted) << log;
  EXPECT_NE(log.find("a notice to another rank"), std::string::npos) << "rank 0 got no signal itself\n"
                                                                     << log;
  const int k = LastStep(Rows("cut", "loss"));
  ASSERT_GE(k, 3);
  ASSERT_TRUE(fs::exists(root() / "cut" / "checkpoints" / ckpt::StepDirName(k))) << log;
  const std::string until = " --set train.steps=" + std::to_string(k + 4);
  const std::string same = std::string(kLong) + until;

  fs::copy(root() / "cut", root() / "cut_to_1", fs::copy_options::recursive);
  auto resumed = Train(2, "cut", same + " --resume auto");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  auto ref = Train(2, "ref", same);
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_EQ(Rows("ref", "loss"), Rows("cut", "loss")) << "resume at the same world size is bit-exact";
  EXPECT_EQ(Weights("ref"), Weights("cut"));

  auto to_one = Train(1, "cut_to_1", same + " --resume auto");
  ASSERT_EQ(to_one.code, 0) << to_one.output;
  EXPECT_LT(MaxRel(Rows("ref", "loss"), Rows("cut_to_1", "loss")), 1e-6) << "2 -> 1";

  // 1 -> 2: a single process stopped by its own notice, resumed on 2 ranks.
  const std::string one_cmd = "OMP_NUM_THREADS=1 " + tern_ + " train " + config_.string() +
                              " --quiet --set run.dir=" + (root() / "one").string() + kLong;
  ASSERT_EQ(TrainAndSignal(one_cmd, root() / "one", 3, 0, SIGTERM, &log), ckpt::kExitPreempted) << log;
  const int k1 = LastStep(Rows("one", "loss"));
  const std::string until1 = std::string(kLong) + " --set train.steps=" + std::to_string(k1 + 4);
  auto to_two = Train(2, "one", until1 + " --resume auto");
  ASSERT_EQ(to_two.code, 0) << to_two.output;
  auto ref1 = Train(1, "ref1", until1);
  ASSERT_EQ(ref1.code, 0) << ref1.output;
  EXPECT_LT(MaxRel(Rows("ref1", "loss"), Rows("one", "loss")), 1e-6) << "1 -> 2";
}

// ZeRO-1 checkpoints at 2 ranks: each rank writes its own optimizer shard file and rank 0's manifest lists
// both (no whole optimizer.safetensors: the moments are never gathered). Resume at 2 ranks is bit-exact
// (losses and weights); 2 -> 1 and 1 -> 2 re-shard the moments (an exact copy) and continue within 1e-6
// relative of the uninterrupted run (the gradient sums are added in another order, as without ZeRO); a step
// whose manifest is missing (a rank died before the exchange) is skipped, saying so, and the previous one
// resumes bit-exactly.
TEST_F(DistTrainTest, ZeroOneShardFilesResumeAtAnyWorldSize) {
  const std::string z = std::string(kLong) + " --set dist.zero=1 --set ckpt.every=2 --set ckpt.keep_last=5";
  auto ref = Train(2, "ref", z + " --set train.steps=8");
  ASSERT_EQ(ref.code, 0) << ref.output;
  auto cut = Train(2, "cut", z + " --set train.steps=4");
  ASSERT_EQ(cut.code, 0) << cut.output;
  const fs::path step4 = root() / "cut" / "checkpoints" / ckpt::StepDirName(4);
  EXPECT_FALSE(fs::exists(step4 / "optimizer.safetensors"));
  std::ifstream man_in(step4 / "manifest.json");
  const auto man = nlohmann::json::parse(man_in, nullptr, false);
  ASSERT_FALSE(man.is_discarded());
  std::map<std::string, std::string> listed;
  for (const auto& f : man["files"]) listed[f["name"]] = f["xxh3"];
  for (const char* f : {"optimizer-00000-of-00002.safetensors", "optimizer-00001-of-00002.safetensors"}) {
    EXPECT_TRUE(fs::exists(step4 / f)) << f;
    EXPECT_EQ(listed[f].size(), 16u) << f << " is listed with its checksum";
  }
  for (const char* copy : {"cut_to_1", "torn"})
    fs::copy(root() / "cut", root() / copy, fs::copy_options::recursive);

  const std::string until8 = z + " --set train.steps=8 --resume auto";
  auto same = Train(2, "cut", until8);
  ASSERT_EQ(same.code, 0) << same.output;
  EXPECT_EQ(Rows("ref", "loss"), Rows("cut", "loss")) << "ZeRO-1 resume at the same world size is bit-exact";
  EXPECT_EQ(Weights("ref"), Weights("cut"));

  auto to_one = Train(1, "cut_to_1", until8);
  ASSERT_EQ(to_one.code, 0) << to_one.output;
  EXPECT_LT(MaxRel(Rows("ref", "loss"), Rows("cut_to_1", "loss")), 1e-6) << "2 -> 1";
  EXPECT_LT(MaxAbs(Weights("ref"), Weights("cut_to_1")), 1e-5);

  // A rank died before the manifest exchange of step 4: its files are there, the manifest is not.
  fs::remove(root() / "torn" / "checkpoints" / ckpt::StepDirName(4) / "manifest.json");
  auto torn = Train(2, "torn", until8);
  ASSERT_EQ(torn.code, 0) << torn.output;
  std::ifstream in(root() / "torn" / "metrics.jsonl");
  std::string line;
  nlohmann::json resume;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == "resume") resume = j;
  }
  ASSERT_TRUE(resume.is_object());
  EXPECT_EQ(resume["step"], 2) << resume.dump();
  ASSERT_EQ(resume["unfinished"].size(), 1u) << resume.dump();
  EXPECT_NE(resume["unfinished"][0].get<std::string>().find("step_00000004 has no manifest.json"),
            std::string::npos)
      << resume.dump();
  EXPECT_EQ(Rows("ref", "loss"), Rows("torn", "loss")) << "the previous checkpoint resumes bit-exactly";

  // 1 -> 2: one process (whole moments) resumed on 2 ranks with ZeRO-1.
  auto one = Train(1, "one", z + " --set train.steps=4");
  ASSERT_EQ(one.code, 0) << one.output;
  auto to_two = Train(2, "one", until8);
  ASSERT_EQ(to_two.code, 0) << to_two.output;
  EXPECT_LT(MaxRel(Rows("ref", "loss"), Rows("one", "loss")), 1e-6) << "1 -> 2";
  EXPECT_LT(MaxAbs(Weights("ref"), Weights("one")), 1e-5);
}

// A rank that stops answering (SIGSTOP: hung, not dead) fails the job within dist.timeout_s with a message
// naming it; a rank killed with -9 ends the job at once (mpirun names it). Either way every rank exits
// non-zero, and the newest checkpoint resumes.
TEST_F(DistTrainTest, AHungOrKilledRankIsNamedAndTheNewestCheckpointResumes) {
  for (const int sig : {SIGSTOP, SIGKILL}) {
    SCOPED_TRACE(sig == SIGSTOP ? "SIGSTOP" : "SIGKILL");
    const std::string run = sig == SIGSTOP ? "hang" : "killed";
    std::string log;
    const std::string cmd = "OMP_NUM_THREADS=1 " + mpirun_ + " --allow-run-as-root --oversubscribe -np 2 " +
                            tern_ + " train " + config_.string() +
                            " --quiet --set run.dir=" + (root() / run).string() + kLong +
                            " --set ckpt.every=2 --set dist.timeout_s=2";
    const auto t0 = std::chrono::steady_clock::now();
    const int code = TrainAndSignal(cmd, root() / run, 4, /*victim=*/1, sig, &log);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(code, 0) << log;
    EXPECT_NE(code, -1) << log;
    EXPECT_LT(took, 30) << log;  // the 2 s timeout, not one per gradient bucket
    EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
    if (sig == SIGSTOP) {
      EXPECT_NE(log.find("did not finish within 2 s: rank 1"), std::string::npos) << log;
    }
    const int k = LastStep(Rows(run, "loss"));
    auto resumed =
        Train(2, run, std::string(kLong) + " --set train.steps=" + std::to_string(k + 2) + " --resume auto");
    EXPECT_EQ(resumed.code, 0) << resumed.output;
  }
}

// Slurm: `srun --mpi=pmix -n 2 tern train` (rank and world from Slurm and PMIx) trains exactly as mpirun
// does.
TEST_F(DistTrainTest, SrunTrainsLikeMpirun) {
  const std::string srun = testing::FindProgram("srun");
  if (srun.empty() || !std::getenv("SLURM_CONF"))
    TERN_SKIP_OR_FAIL_IN_CI("needs a running Slurm: eval \"$(scripts/slurm-local start)\" sets SLURM_CONF");
  auto mpi = Train(2, "mpi");
  ASSERT_EQ(mpi.code, 0) << mpi.output;
  auto slurm = testing::RunCommand("OMP_NUM_THREADS=1 " + srun + " --mpi=pmix -n 2 " + tern_ + " train " +
                                   config_.string() + " --quiet --set run.dir=" + (root() / "srun").string());
  ASSERT_EQ(slurm.code, 0) << slurm.output;
  std::ifstream in(root() / "srun" / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(nlohmann::json::parse(line)["world"], 2) << line;
  EXPECT_EQ(Rows("mpi", "loss"), Rows("srun", "loss"));
  EXPECT_EQ(Weights("mpi"), Weights("srun"));
}

}  // namespace
}  // namespace tern
