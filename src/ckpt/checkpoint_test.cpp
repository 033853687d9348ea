// The checkpoint format, damage detection, resume selection across tiers, retention, and the async writer.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "ckpt/fault_storage.h"
#include "ckpt/local_storage.h"
#include "ckpt/manager.h"

namespace tern::ckpt {
namespace {

// Unwraps a Result in an expression (Result's operator* works on lvalues only).
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : T{};
}

namespace fs = std::filesystem;

// A tiny state: one tensor whose values depend on the step, and a trainer.json.
Status FillFor(Snapshot& snap, int64_t step, size_t n = 64) {
  if (snap.images.empty())
    snap.images.emplace_back(
        "tensors.safetensors",
        std::make_unique<SafetensorsImage>(std::vector<TensorSpec>{{"w", {static_cast<int64_t>(n)}}},
                                           std::map<std::string, std::string>{{"k", "v"}}));
  for (size_t i = 0; i < n; i++) snap.images[0].second->data()[i] = static_cast<float>(step * 1000 + i);
  snap.small_files["trainer.json"] = fmt::format("{{\"step\": {}}}", step);
  snap.manifest.tokenizer = "tok";
  return Status::Ok();
}

Status Save(Storage& s, int64_t step) {
  Snapshot snap;
  snap.step = step;
  TERN_RETURN_IF_ERROR(FillFor(snap, step));
  return PersistSnapshot(snap, s).status();
}

// The memory storage behind each tier, so tests can damage objects directly.
struct Tiers {
  std::map<std::string, MemStorage*> mem;
  StorageOpener Opener() {
    return [this](const std::string& uri) -> Result<std::unique_ptr<Storage>> {
      auto m = std::make_unique<MemStorage>();
      mem[uri] = m.get();
      return std::unique_ptr<Storage>(std::move(m));
    };
  }
};

TEST(Format, PersistThenVerifyAndLoad) {
  MemStorage s;
  ASSERT_TRUE(Save(s, 7).ok());
  auto refs = ListCheckpoints(s);
  ASSERT_TRUE(refs.ok());
  ASSERT_EQ(refs->size(), 1u);
  EXPECT_EQ((*refs)[0].dir, "step_00000007");
  EXPECT_TRUE((*refs)[0].has_manifest);
  VerifyReport r = VerifyCheckpoint(s, "step_00000007");
  EXPECT_TRUE(r.ok) << (r.problems.empty() ? "" : r.problems[0]);
  auto loaded = LoadCheckpoint(s, "step_00000007");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->manifest.step, 7);
  EXPECT_EQ(loaded->manifest.files.size(), 2u);
  auto st = ParseSafetensors(loaded->files["tensors.safetensors"]);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->metadata["k"], "v");
  const float* w = reinterpret_cast<const float*>(st->tensors["w"].data.data());
  EXPECT_EQ(w[3], 7003.0f);
}

// Each kind of damage is detected, named, and resume falls back to the previous valid checkpoint.
struct Damage {
  const char* name;
  std::function<void(MemStorage&)> apply;
  const char* expect;  // in the problem text
};

class DamageTest : public ::testing::TestWithParam<Damage> {};

TEST_P(DamageTest, DetectedNamedAndSkipped) {
  Tiers tiers;
  ManagerOptions mo;
  mo.tiers = {{"fast", "fast", 1, {}}};
  mo.open_storage = tiers.Opener();
  auto m = CheckpointManager::Open(mo);
  ASSERT_TRUE(m.ok());
  MemStorage& s = *tiers.mem["fast"];
  ASSERT_TRUE(Save(s, 10).ok());
  ASSERT_TRUE(Save(s, 20).ok());
  GetParam().apply(s);
  VerifyReport r = VerifyCheckpoint(s, "step_00000020");
  EXPECT_FALSE(r.ok);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_NE(r.problems[0].find(GetParam().expect), std::string::npos) << r.problems[0];
  std::vector<std::string> skipped;
  auto loaded = (*m)->LoadNewestValid(&skipped);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->manifest.step, 10) << "the older valid checkpoint is used";
  if (std::string(GetParam().name) != "missing_manifest") {
    ASSERT_EQ(skipped.size(), 1u) << "the damaged one is reported";
    EXPECT_NE(skipped[0].find("step_00000020"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, DamageTest,
    ::testing::Values(Damage{"truncated",
                             [](MemStorage& s) {
                               std::string b = V(s.Get("step_00000020/tensors.safetensors"));
                               s.Put("step_00000020/tensors.safetensors", b.substr(0, b.size() - 10)).ok();
                             },
                             "truncated"},
                      Damage{"flipped_byte",
                             [](MemStorage& s) {
                               std::string b = V(s.Get("step_00000020/tensors.safetensors"));
                               b[b.size() - 5] ^= 0x01;
                               s.Put("step_00000020/tensors.safetensors", b).ok();
                             },
                             "corrupted"},
                      Damage{"missing_manifest",
                             [](MemStorage& s) { s.Delete("step_00000020/manifest.json").ok(); },
                             "manifest.json missing"},
                      Damage{"missing_file",
                             [](MemStorage& s) { s.Delete("step_00000020/trainer.json").ok(); },
                             "trainer.json: missing"},
                      Damage{"garbage_manifest",
                             [](MemStorage& s) { s.Put("step_00000020/manifest.json", "{not json").ok(); },
                             "manifest.json"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Resume, NewestAcrossTiersDurableOnlyWhenNewer) {
  Tiers tiers;
  ManagerOptions mo;
  mo.tiers = {{"fast", "fast", 1, {}}, {"durable", "durable", 1, {}}};
  mo.open_storage = tiers.Opener();
  auto m = CheckpointManager::Open(mo);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(Save(*tiers.mem["fast"], 30).ok());
  ASSERT_TRUE(Save(*tiers.mem["durable"], 30).ok());
  ASSERT_TRUE(Save(*tiers.mem["durable"], 20).ok());
  auto a = (*m)->LoadNewestValid(nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->location, "mem://step_00000030");
  EXPECT_EQ(a->manifest.step, 30);
  ASSERT_TRUE(Save(*tiers.mem["durable"], 40).ok());
  auto b = (*m)->LoadNewestValid(nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->manifest.step, 40) << "durable wins when newer (the fast disk died with the last instance)";
}

// The clock jumping between saves: created_utc (informative, from the wall clock) goes back and forth, but
// retention and resume order checkpoints by step, so the newest step stays the one kept and loaded.
TEST(Retention, AJumpingClockChangesNeitherRetentionNorResume) {
  Tiers tiers;
  ManagerOptions mo;
  mo.tiers = {{"fast", "fast", 1, {}}};
  mo.open_storage = tiers.Opener();
  auto m = CheckpointManager::Open(mo);
  ASSERT_TRUE(m.ok());
  MemStorage& s = *tiers.mem["fast"];
  const std::map<int64_t, std::string> created = {{10, "2031-01-01T00:00:00Z"},   // clock far ahead
                                                  {20, "1999-12-31T23:59:59Z"},   // then set back
                                                  {30, "2001-09-09T01:46:40Z"}};  // still in the past
  for (const auto& [step, utc] : created) {
    ASSERT_TRUE(Save(s, step).ok());
    const std::string key = StepDirName(step) + "/manifest.json";
    auto manifest = Manifest::Parse(V(s.Get(key)));
    ASSERT_TRUE(manifest.ok());
    manifest->created_utc = utc;  // the manifest is not covered by its own checksums
    ASSERT_TRUE(s.Put(key, manifest->ToJson()).ok());
  }
  RetentionPolicy keep2;
  keep2.keep_last = 2;
  auto gc = CollectGarbage(s, keep2, /*no_save_in_flight=*/true);
  ASSERT_TRUE(gc.ok()) << gc.status().ToString();
  EXPECT_EQ(gc->removed, std::vector<int64_t>({10})) << "the oldest step goes, whatever its timestamp";
  EXPECT_EQ(gc->kept, std::vector<int64_t>({20, 30}));
  auto newest = (*m)->LoadNewestValid(nullptr);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  EXPECT_EQ(newest->manifest.step, 30);
  EXPECT_EQ(newest->manifest.created_utc, "2001-09-09T01:46:40Z");
}

TEST(Retention, PlanKeepsLastMilestonesBestAndNewest) {
  std::vector<RetentionEntry> e;
  for (int s = 100; s <= 1000; s += 100) e.push_back({s, true, 5.0 - s / 1000.0});
  e[2].val_loss = 1.0;             // step 300 is the best
  e.push_back({1100, false, {}});  // debris newer than the newest valid: maybe in flight
  e.push_back({50, false, {}});    // old debris
  RetentionPlan p = PlanRetention(e, {2, 500, 1}, /*no_save_in_flight=*/false);
  EXPECT_EQ(p.keep, (std::vector<int64_t>{300, 500, 900, 1000}));
  EXPECT_EQ(p.remove, (std::vector<int64_t>{50, 100, 200, 400, 600, 700, 800}));
  RetentionPlan q = PlanRetention(e, {2, 500, 1}, /*no_save_in_flight=*/true);
  EXPECT_EQ(q.remove.back(), 1100);
  RetentionPlan all = PlanRetention(e, {0, 0, 0}, false);
  EXPECT_EQ(all.keep.size(), 10u);
}

TEST(Retention, GcDeletesManifestFirstSoACrashLeavesDebrisNotLies) {
  MemStorage mem;
  FaultInjectionStorage f(&mem);
  for (int s : {1, 2, 3}) ASSERT_TRUE(Save(f, s).ok());
  // The data deletes of step 1 fail after its manifest is gone (a crash in the middle of gc).
  f.FailCalls(FaultInjectionStorage::kDelete, "step_00000001/tensors", Status::IoError("crash"), -1);
  EXPECT_FALSE(CollectGarbage(f, {1, 0, 0}, true).ok());
  EXPECT_FALSE(V(mem.Exists("step_00000001/manifest.json")));
  VerifyReport r = VerifyCheckpoint(mem, "step_00000001");
  EXPECT_NE(r.problems[0].find("manifest.json missing"), std::string::npos)
      << "debris, never a half checkpoint";
  f.ClearFailures();
  auto gc = CollectGarbage(f, {1, 0, 0}, true);
  ASSERT_TRUE(gc.ok());
  EXPECT_EQ(gc->kept, (std::vector<int64_t>{3}));
  EXPECT_TRUE(mem.List("step_00000001/")->empty());
  EXPECT_TRUE(mem.List("step_00000002/")->empty());
}

TEST(Writer, ACrashAtAnyPointLeavesTheOldCheckpointOrTheNewOneNeverHalf) {
  // Kill the writer after each possible number of storage calls, then lose a random subset of what was not
  // synced: a surviving manifest always comes with its data, and step 1 always survives.
  for (int ops = 0; ops < 12; ops++) {
    for (uint64_t seed = 1; seed <= 8; seed++) {
      MemStorage mem;
      FaultInjectionStorage f(&mem);
      ASSERT_TRUE(Save(f, 1).ok());
      f.FreezeAfter(ops);
      Status st = Save(f, 2);
      f.SimulateCrash(/*keep_some=*/true, seed);
      for (const auto& ref : V(ListCheckpoints(mem))) {
        if (ref.has_manifest) {
          EXPECT_TRUE(VerifyCheckpoint(mem, ref.dir).ok) << ref.dir << " ops " << ops << " seed " << seed;
        }
      }
      EXPECT_TRUE(VerifyCheckpoint(mem, "step_00000001").ok);
      if (st.ok()) {
        EXPECT_TRUE(VerifyCheckpoint(mem, "step_00000002").ok) << "a save that returned ok is durable";
      }
    }
  }
}

TEST(Writer, AsyncSavesOneInFlightWaitOrSkip) {
  for (bool skip : {false, true}) {
    MemStorage mem;
    FaultInjectionStorage slow(&mem);
    ManagerOptions mo;
    mo.tiers = {{"fast", "x", 1, {0, 0, 0}}};
    mo.skip_when_busy = skip;
    std::atomic<bool> release{false};
    mo.open_storage = [&](const std::string&) -> Result<std::unique_ptr<Storage>> {
      // A storage whose Puts block until released: the first save stays in flight.
      struct Blocking : FaultInjectionStorage {
        std::atomic<bool>* release;
        Blocking(Storage* b, std::atomic<bool>* r) : FaultInjectionStorage(b), release(r) {}
        Status Put(const std::string& k, std::string_view d) override {
          while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return FaultInjectionStorage::Put(k, d);
        }
      };
      return std::unique_ptr<Storage>(new Blocking(&mem, &release));
    };
    auto m = CheckpointManager::Open(mo);
    ASSERT_TRUE(m.ok());
    auto fill = [](int64_t step) { return [step](Snapshot& s) { return FillFor(s, step); }; };
    ASSERT_TRUE((*m)->Save(1, {0}, "periodic", std::nullopt, fill(1)).ok());
    EXPECT_TRUE((*m)->busy());
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      release = true;
    });
    ASSERT_TRUE((*m)->Save(2, {0}, "periodic", std::nullopt, fill(2)).ok());
    releaser.join();
    (*m)->WaitIdle();
    auto events = (*m)->TakeEvents();
    ASSERT_EQ(events.size(), 2u);
    if (skip) {
      EXPECT_TRUE(events[0].skipped) << "step 2 was skipped while step 1 was in flight";
      EXPECT_EQ(events[1].step, 1);
      EXPECT_FALSE(V(mem.Exists("step_00000002/manifest.json")));
    } else {
      EXPECT_EQ(events[1].step, 2);
      EXPECT_GE(events[1].wait_ms, 20.0) << "step 2 waited for step 1";
      EXPECT_TRUE(VerifyCheckpoint(mem, "step_00000002").ok);
    }
    EXPECT_TRUE(VerifyCheckpoint(mem, "step_00000001").ok);
  }
}

TEST(Writer, DiskFullFailsClearlyAndKeepsThePreviousCheckpoint) {
  MemStorage mem;
  FaultInjectionStorage f(&mem);
  ManagerOptions mo;
  mo.tiers = {{"fast", "x", 1, {1, 0, 0}}};
  mo.open_storage = [&](const std::string&) -> Result<std::unique_ptr<Storage>> {
    struct Borrowed : FaultInjectionStorage {
      using FaultInjectionStorage::FaultInjectionStorage;
    };
    return std::unique_ptr<Storage>(new Borrowed(&f));
  };
  auto m = CheckpointManager::Open(mo);
  ASSERT_TRUE(m.ok());
  auto fill = [](int64_t step) { return [step](Snapshot& s) { return FillFor(s, step, 4096); }; };
  ASSERT_TRUE((*m)->Save(1, {0}, "periodic", std::nullopt, fill(1)).ok());
  (*m)->WaitIdle();
  uint64_t used = 0;
  for (const auto& o : V(mem.List(""))) used += o.size;
  f.SetCapacity(used + 10000);  // room for step 1 and a bit, not for step 2's 16 KiB of tensors
  ASSERT_TRUE((*m)->Save(2, {0}, "periodic", std::nullopt, fill(2)).ok());
  (*m)->WaitIdle();
  auto events = (*m)->TakeEvents();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(events[0].status.ok());
  EXPECT_FALSE(events[1].status.ok());
  EXPECT_NE(events[1].status.message().find("No space left on device"), std::string::npos)
      << events[1].status.message();
  EXPECT_TRUE(VerifyCheckpoint(mem, "step_00000001").ok) << "retention never ran for the failed save";
  EXPECT_TRUE(mem.List("step_00000002/")->empty()) << "partial files are removed";
}

}  // namespace
}  // namespace tern::ckpt
