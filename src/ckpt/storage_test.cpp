// Storage backends and the fault-injection double: atomic Put, listing, deleting, crash semantics, disk full.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "ckpt/fault_storage.h"
#include "ckpt/local_storage.h"
#include "ckpt/safetensors_image.h"

namespace tern::ckpt {
namespace {

// Unwraps a Result in an expression (Result's operator* works on lvalues only).
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : T{};
}

namespace fs = std::filesystem;

// A fresh directory for one test, removed afterwards (per process: ctest runs cases in parallel).
struct FreshDir {
  explicit FreshDir(const std::string& name)
      : path(fs::temp_directory_path() / ("tern_storage_test_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
  }
  ~FreshDir() { fs::remove_all(path); }
  std::string string() const { return path.string(); }
  fs::path path;
};

TEST(LocalStorage, PutGetListDelete) {
  FreshDir dir("basic");
  auto s = LocalStorage::Open(dir.string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Storage& st = **s;
  ASSERT_TRUE(st.Put("step_00000001/a.bin", "hello").ok());
  ASSERT_TRUE(st.Put("step_00000001/b.bin", std::string(10 << 20, 'x')).ok());  // > one 8 MiB chunk
  ASSERT_TRUE(st.Put("step_00000002/a.bin", "x").ok());
  ASSERT_TRUE(st.SyncDir("step_00000001").ok());
  EXPECT_EQ(V(st.Get("step_00000001/a.bin")), "hello");
  EXPECT_EQ(st.Get("nope").status().code(), Status::Code::kNotFound);
  auto l = st.List("step_00000001/");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[1].key, "step_00000001/b.bin");
  EXPECT_EQ((*l)[1].size, 10u << 20);
  EXPECT_EQ(st.List("")->size(), 3u);
  // No temp files are left behind by a successful Put.
  for (auto& e : fs::recursive_directory_iterator(st.uri()))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  EXPECT_TRUE(V(st.Exists("step_00000002/a.bin")));
  ASSERT_TRUE(st.Delete("step_00000002/a.bin").ok());
  EXPECT_FALSE(V(st.Exists("step_00000002/a.bin")));
  EXPECT_FALSE(fs::exists(fs::path(st.uri()) / "step_00000002")) << "an emptied step directory goes too";
  EXPECT_TRUE(st.Delete("step_00000002/a.bin").ok()) << "deleting a missing key is fine";
}

TEST(LocalStorage, LargeAlignedObjectsGoDirectAndReadBackExactly) {
  // >= 64 MiB and page-aligned (as snapshot images are): O_DIRECT for the aligned bulk, buffered for the
  // tail.
  FreshDir dir("direct");
  auto s = LocalStorage::Open(dir.string());
  ASSERT_TRUE(s.ok());
  SafetensorsImage img({{"w", {(16 << 20) + 5}}}, {});
  for (size_t i = 0; i < (16u << 20) + 5; i++) img.data()[i] = static_cast<float>(i % 1000);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(img.bytes().data()) % 4096, 0u);
  ASSERT_TRUE((*s)->Put("big.safetensors", img.bytes()).ok());
  EXPECT_TRUE(V((*s)->Get("big.safetensors")) == img.bytes());
}

TEST(LocalStorage, OverwriteIsAtomicReplace) {
  FreshDir dir("overwrite");
  auto s = LocalStorage::Open(dir.string());
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Put("k", "old contents").ok());
  ASSERT_TRUE((*s)->Put("k", "new").ok());
  EXPECT_EQ(V((*s)->Get("k")), "new");
}

TEST(FaultInjectionStorage, CrashDropsWhatWasNotSynced) {
  MemStorage mem;
  FaultInjectionStorage f(&mem);
  ASSERT_TRUE(f.Put("d1/a", "1").ok());
  ASSERT_TRUE(f.SyncDir("d1").ok());
  ASSERT_TRUE(f.Put("d1/b", "2").ok());
  ASSERT_TRUE(f.Put("d2/c", "3").ok());
  EXPECT_EQ(f.unsynced_count(), 2u);
  f.SimulateCrash();
  EXPECT_TRUE(V(f.Exists("d1/a")));
  EXPECT_FALSE(V(f.Exists("d1/b")));
  EXPECT_FALSE(V(f.Exists("d2/c")));
}

TEST(FaultInjectionStorage, DiskFullFailsThePutAndKeepsTheRest) {
  MemStorage mem;
  FaultInjectionStorage f(&mem);
  f.SetCapacity(100);
  ASSERT_TRUE(f.Put("a", std::string(60, 'a')).ok());
  Status st = f.Put("b", std::string(60, 'b'));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("No space left"), std::string::npos) << st.message();
  EXPECT_FALSE(V(f.Exists("b")));
  EXPECT_EQ(f.Get("a")->size(), 60u);
  EXPECT_TRUE(f.Put("a", std::string(90, 'a')).ok()) << "an overwrite reuses the old object's space";
}

TEST(FaultInjectionStorage, FailsCallsOnDemand) {
  MemStorage mem;
  FaultInjectionStorage f(&mem);
  f.FailCalls(FaultInjectionStorage::kPut, "manifest", Status::IoError("injected"), 1);
  EXPECT_TRUE(f.Put("x/data", "1").ok());
  EXPECT_FALSE(f.Put("x/manifest.json", "1").ok());
  EXPECT_TRUE(f.Put("x/manifest.json", "1").ok()) << "count=1: only the first call fails";
}

}  // namespace
}  // namespace tern::ckpt
