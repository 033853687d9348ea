// Disk faults that must lose nothing, on real filesystems: a small tmpfs that fills up in the middle of a
// save, and one remounted read-only. Each save fails with a message that names the disk and what to do, the
// partial files are gone, and the previous checkpoint verifies and loads. Then `tern train` itself on a
// disk that fills: it keeps training (ckpt.on_error=continue) or stops with exit 1 (stop), and resumes from
// the last good checkpoint. Mounting needs root (CI runs as root); elsewhere the tests skip, saying so.
#include <gtest/gtest.h>

#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/format.h"
#include "ckpt/local_storage.h"
#include "testing/processes.h"
#include "testing/tiny_config.h"

namespace tern::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;

class DiskFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tern_disk_fault_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_ / "mnt");
  }
  void TearDown() override {
    if (mounted_) RunCommand("umount -l " + Mnt());
    fs::remove_all(root_);
  }
  // A tmpfs of `size` (mount(8) syntax: "2m") at Mnt(); false (and the test skips) when it cannot be made.
  bool Mount(const std::string& size) {
    if (::geteuid() != 0) {
      skip_ = "mounting a tmpfs needs root (CI runs as root)";
      return false;
    }
    CommandResult r = RunCommand("mount -t tmpfs -o size=" + size + " tmpfs " + Mnt());
    if (r.code != 0) {
      skip_ = "mount -t tmpfs failed (no CAP_SYS_ADMIN in this container?): " + r.output;
      return false;
    }
    mounted_ = true;
    return true;
  }
  std::string Mnt() const { return (root_ / "mnt").string(); }
  double FreeMiB() const {
    struct statvfs v;
    return ::statvfs(Mnt().c_str(), &v) == 0 ? v.f_bavail * double(v.f_frsize) / (1 << 20) : -1;
  }
  fs::path root_;
  bool mounted_ = false;
  std::string skip_;
};

Snapshot MakeSnapshot(int64_t step, size_t floats) {
  Snapshot snap;
  snap.step = step;
  snap.manifest.kind = "periodic";
  snap.images.emplace_back("tensors.safetensors", std::make_unique<SafetensorsImage>(
                                                      std::vector<TensorSpec>{{"w", {int64_t(floats)}}},
                                                      std::map<std::string, std::string>{}));
  for (size_t i = 0; i < floats; i++) snap.images[0].second->data()[i] = float(i % 101) + float(step);
  snap.small_files["trainer.json"] = "{\"step\": " + std::to_string(step) + "}";
  return snap;
}

void ExpectLoads(Storage& s, int64_t step, const Snapshot& snap) {
  auto loaded = LoadCheckpoint(s, StepDirName(step));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->files["tensors.safetensors"] == snap.images[0].second->bytes());
}

TEST_F(DiskFaultTest, DiskFullMidSaveNamesTheDiskAndKeepsThePreviousCheckpoint) {
  if (!Mount("2m")) GTEST_SKIP() << skip_;
  auto s = LocalStorage::Open(Mnt());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Snapshot first = MakeSnapshot(1, 100'000);  // 400 KB
  ASSERT_TRUE(PersistSnapshot(first, **s).ok());
  const double free_before = FreeMiB();
  Snapshot big = MakeSnapshot(2, 600'000);  // 2.4 MB: the disk fills in the middle of the tensor file
  auto failed = PersistSnapshot(big, **s);
  ASSERT_FALSE(failed.ok());
  const std::string msg = failed.status().message();
  EXPECT_NE(msg.find("No space left on device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the disk holding " + Mnt() + " is full"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MiB free of"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ckpt.dir"), std::string::npos) << msg;
  EXPECT_NE(msg.find("saving checkpoint step 2"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(fs::path(Mnt()) / "step_00000002" / "manifest.json"));
  EXPECT_NEAR(FreeMiB(), free_before, 0.05) << "the partial files are removed";
  ExpectLoads(**s, 1, first);
  EXPECT_TRUE(VerifyCheckpoint(**s, "step_00000001").ok);
  Snapshot small = MakeSnapshot(3, 100'000);  // the disk was not left fuller: the next save fits
  ASSERT_TRUE(PersistSnapshot(small, **s).ok());
  ExpectLoads(**s, 3, small);
}

TEST_F(DiskFaultTest, ReadOnlyDirectoryFailsClearlyAndTheCheckpointStillLoads) {
  if (!Mount("4m")) GTEST_SKIP() << skip_;
  auto s = LocalStorage::Open(Mnt());
  ASSERT_TRUE(s.ok());
  Snapshot first = MakeSnapshot(1, 10'000);
  ASSERT_TRUE(PersistSnapshot(first, **s).ok());
  // Root ignores mode bits, so the filesystem itself is made read-only.
  CommandResult ro = RunCommand("mount -o remount,ro " + Mnt());
  ASSERT_EQ(ro.code, 0) << ro.output;
  Snapshot second = MakeSnapshot(2, 10'000);
  auto failed = PersistSnapshot(second, **s);
  ASSERT_FALSE(failed.ok());
  const std::string msg = failed.status().message();
  EXPECT_NE(msg.find("Read-only file system"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mounted read-only"), std::string::npos) << msg;
  EXPECT_NE(msg.find(Mnt()), std::string::npos) << msg;
  ExpectLoads(**s, 1, first);
  auto reopened = LocalStorage::Open(Mnt());  // opening an existing read-only tier for resume works
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ExpectLoads(**reopened, 1, first);
  RunCommand("mount -o remount,rw " + Mnt());
}

std::vector<nlohmann::json> Rows(const fs::path& metrics, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

// `tern train` with its fast tier on a 1 MiB tmpfs: two checkpoints of the tiny model (~430 KB each) fit,
// the third fills the disk. With ckpt.on_error=continue the run trains to the end, logs every failed save
// with the disk's message, and the last good checkpoint verifies and resumes; with stop it exits 1 saying so.
TEST_F(DiskFaultTest, TrainerOnAFillingDiskContinuesOrStopsAndResumes) {
  if (!Mount("1m")) GTEST_SKIP() << skip_;
  const char* b = std::getenv("TERN_BINARY_DIR");
  const std::string tern = std::string(b ? b : "build") + "/tern";
  const std::string data =
      testing::SharedPreparedData([&](const std::string& corpus, const std::string& out) {
        CommandResult r = RunCommand(tern + " prepare --input " + corpus + " --out " + out +
                                     " --vocab-size 300 --val-fraction 0.1 --threads 1");
        EXPECT_EQ(r.code, 0) << r.output;
        return r.code == 0;
      });
  ASSERT_FALSE(data.empty());
  std::ofstream(root_ / "tiny.yaml") << testing::TinyTrainYaml(data,
                                                               {.n_layer = 2,
                                                                .total_batch_tokens = 256,
                                                                .steps = 12,
                                                                .warmup_steps = 2,
                                                                .lr = "3.0e-3",
                                                                .more = "ckpt: {every: 3, keep_last: 2}\n"});
  auto train = [&](const std::string& run, const std::string& args) {
    return RunCommand("OMP_NUM_THREADS=1 " + tern + " train " + (root_ / "tiny.yaml").string() +
                      " --set run.dir=" + (root_ / run).string() + " --set ckpt.dir=" + Mnt() + "/" + run +
                      " " + args + " 2>&1");
  };
  CommandResult go = train("cont", "");
  ASSERT_EQ(go.code, 0) << go.output;
  EXPECT_NE(go.output.find("is full"), std::string::npos) << "the failed save is on stderr:\n" << go.output;
  const auto failed = Rows(root_ / "cont" / "metrics.jsonl", "checkpoint_failed");
  const auto saved = Rows(root_ / "cont" / "metrics.jsonl", "checkpoint");
  ASSERT_GE(failed.size(), 1u);
  ASSERT_GE(saved.size(), 1u);
  EXPECT_NE(failed[0]["error"].get<std::string>().find("No space left on device"), std::string::npos);
  const int good = saved.back()["step"].get<int>();
  CommandResult verify = RunCommand(tern + " ckpt verify " + Mnt() + "/cont 2>&1");
  EXPECT_NE(verify.output.find(StepDirName(good)), std::string::npos) << verify.output;
  EXPECT_TRUE(fs::exists(root_ / "cont" / "model.safetensors")) << "the trained model is still written";

  // The space is freed (here: the debris-free tier moves to a roomy disk) and the run resumes from it.
  fs::copy(Mnt() + "/cont", root_ / "ckpt_copy", fs::copy_options::recursive);
  CommandResult resumed =
      RunCommand("OMP_NUM_THREADS=1 " + tern + " train " + (root_ / "tiny.yaml").string() +
                 " --set run.dir=" + (root_ / "cont2").string() +
                 " --set ckpt.dir=" + (root_ / "ckpt_copy").string() + " --resume auto --quiet 2>&1");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const auto resume = Rows(root_ / "cont2" / "metrics.jsonl", "resume");
  ASSERT_EQ(resume.size(), 1u);
  EXPECT_EQ(resume[0]["step"].get<int>(), good);

  fs::remove_all(Mnt() + "/cont");
  CommandResult stop = train("stop", "--set ckpt.on_error=stop");
  EXPECT_EQ(stop.code, 1) << stop.output;
  EXPECT_NE(stop.output.find("ckpt.on_error=stop (the previous checkpoint is intact)"), std::string::npos)
      << stop.output;
  EXPECT_NE(stop.output.find("No space left on device"), std::string::npos) << stop.output;
}

}  // namespace
}  // namespace tern::ckpt
