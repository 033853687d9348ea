// Checkpoints with files from several processes (ZeRO-1's optimizer shards): the manifest is written last,
// after the exchange, and lists every process's file; a failed exchange leaves no manifest (and resume says
// why it skips that step); a process reads only the files it wants.
#include <gtest/gtest.h>

#include "ckpt/fault_storage.h"
#include "ckpt/manager.h"

namespace tern::ckpt {
namespace {

bool Has(Storage& s, const std::string& key) {
  auto r = s.Exists(key);
  return r.ok() && *r;
}

// One "own" tensor file and a trainer.json, as rank 0 writes them.
void Fill(Snapshot& snap, int64_t step) {
  snap.step = step;
  snap.images.clear();
  snap.images.emplace_back("tensors.safetensors",
                           std::make_unique<SafetensorsImage>(std::vector<TensorSpec>{{"w", {4}}},
                                                              std::map<std::string, std::string>{}));
  for (int i = 0; i < 4; i++) snap.images[0].second->data()[i] = static_cast<float>(step + i);
  snap.small_files["trainer.json"] = "{}";
}

// What another rank writes: its own file, through PutCheckpointFile.
std::string ShardBytes(int64_t step) {
  SafetensorsImage img({{"adam.m", {2}}}, {});
  img.data()[0] = static_cast<float>(step);
  img.data()[1] = 1;
  return std::string(img.bytes());
}

TEST(ShardFiles, TheManifestComesLastAndListsEveryRanksFile) {
  MemStorage s;
  Snapshot snap;
  Fill(snap, 3);
  bool called = false;
  snap.gather_files = [&](Storage& st, const Status& mine) -> Result<std::vector<ManifestFile>> {
    called = true;
    EXPECT_TRUE(mine.ok());
    // Here the own files are durable and there is no manifest yet; the other rank writes now.
    EXPECT_TRUE(Has(st, "step_00000003/tensors.safetensors"));
    EXPECT_FALSE(Has(st, "step_00000003/manifest.json"));
    TERN_ASSIGN_OR_RETURN(ManifestFile f,
                          PutCheckpointFile(st, 3, "optimizer-00001-of-00002.safetensors", ShardBytes(3)));
    return std::vector<ManifestFile>{f};
  };
  ASSERT_TRUE(PersistSnapshot(snap, s).ok());
  EXPECT_TRUE(called);
  auto loaded = LoadCheckpoint(s, "step_00000003");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->manifest.files.size(), 3u);
  EXPECT_EQ(loaded->files.count("optimizer-00001-of-00002.safetensors"), 1u) << "listed, checked and read";
  // A process that does not want the other rank's file reads only its own.
  auto mine = LoadCheckpoint(s, "step_00000003",
                             [](const std::string& name) { return !name.starts_with("optimizer"); });
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(mine->files.size(), 2u);
  // Damage to the other rank's file is found by whoever reads it.
  ASSERT_TRUE(s.Put("step_00000003/optimizer-00001-of-00002.safetensors", ShardBytes(4)).ok());
  EXPECT_FALSE(LoadCheckpoint(s, "step_00000003").ok());
}

TEST(ShardFiles, AFailedExchangeLeavesNoManifestAndResumeTakesThePreviousStep) {
  MemStorage s;
  {
    Snapshot ok;
    Fill(ok, 2);
    ASSERT_TRUE(PersistSnapshot(ok, s).ok());
  }
  Snapshot snap;
  Fill(snap, 4);
  snap.gather_files = [&](Storage&, const Status&) -> Result<std::vector<ManifestFile>> {
    return Status::Unavailable("rank 1 could not write its optimizer shard of step 4");
  };
  auto st = PersistSnapshot(snap, s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("rank 1 could not write"), std::string::npos) << st.status().message();
  EXPECT_FALSE(Has(s, "step_00000004/manifest.json"));
  EXPECT_FALSE(Has(s, "step_00000004/tensors.safetensors")) << "own files removed again";
  // A rank that died before the exchange: its file is there, rank 0's are, the manifest is not.
  Fill(snap, 6);
  snap.gather_files = nullptr;
  ASSERT_TRUE(s.Put("step_00000006/optimizer-00001-of-00002.safetensors", ShardBytes(6)).ok());
  ASSERT_TRUE(s.Put("step_00000006/tensors.safetensors", snap.images[0].second->bytes()).ok());

  ManagerOptions o;
  o.async = false;
  o.tiers.push_back({"fast", "mem://fast", 1, {}});
  MemStorage* mem = nullptr;
  o.open_storage = [&](const std::string&) -> Result<std::unique_ptr<Storage>> {
    auto m = std::make_unique<MemStorage>();
    mem = m.get();
    return std::unique_ptr<Storage>(std::move(m));
  };
  auto m = CheckpointManager::Open(o);
  ASSERT_TRUE(m.ok());
  auto objects = s.List("");
  ASSERT_TRUE(objects.ok());
  for (const auto& obj : *objects) {
    auto bytes = s.Get(obj.key);
    ASSERT_TRUE(bytes.ok());
    ASSERT_TRUE(mem->Put(obj.key, *bytes).ok());
  }
  std::vector<std::string> skipped, unfinished;
  auto loaded = (*m)->LoadNewestValid(&skipped, {}, &unfinished);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->manifest.step, 2);
  EXPECT_TRUE(skipped.empty());
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_NE(unfinished[0].find("step_00000006 has no manifest.json"), std::string::npos) << unfinished[0];
}

}  // namespace
}  // namespace tern::ckpt
