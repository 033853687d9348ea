// The registry in an s3:// prefix (moto_server on loopback, signatures checked): a version registered from
// one machine's cache is read, verified and resolved from another's (the index travels in the bucket), and
// the same weights registered twice are one object.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ckpt/storage.h"
#include "registry/registry.h"
#include "testing/moto_suite.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/test_run.h"

namespace tern::registry {
namespace {

constexpr char kRegistryS3Bucket[] = "models";

class RegistryS3 : public testing::MotoSuite<kRegistryS3Bucket> {
 protected:
  std::unique_ptr<Registry> Open(const std::string& cache) {
    RegistryOptions o;
    o.location = "s3://models/registry";
    o.cache_dir = cache;
    o.s3.endpoint = moto_->endpoint;
    o.s3.max_attempts = 2;
    auto r = Registry::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
};

TEST_F(RegistryS3, AVersionRegisteredOnOneMachineResolvesOnAnother) {
  auto run = testing::MakeTestRun(1, 32, 2, 32);
  testing::TempDir a, b;
  auto src = ReadModelSource(run->dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  {
    auto reg = Open(a.path());
    ASSERT_TRUE(reg);
    ASSERT_TRUE(reg->Register(*src, {"tiny", "production", "", ""}).ok());
    ASSERT_TRUE(reg->Register(*src, {"tiny", "", "", ""}).ok());
    auto blobs = reg->store().List("blobs/sha256/");
    ASSERT_TRUE(blobs.ok());
    EXPECT_EQ(blobs->size(), 2u);  // weights and tokenizer, once each
  }
  auto other = Open(b.path());
  ASSERT_TRUE(other);
  auto list = other->List("tiny");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  auto e = other->Get(ModelRef{"tiny", std::nullopt, "production"});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->version, 1);
  auto dir = other->Materialize(ModelRef{"tiny", 2, ""});
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(dir->rfind(b.path(), 0), 0u) << *dir;  // resolved into this machine's cache
  EXPECT_EQ(testing::ReadFile(*dir + "/model.safetensors"),
            testing::ReadFile(run->dir / "model.safetensors"));
}

// A run trained on data published to S3 (data.dir: s3://...) gets its lineage from the prepare.json there,
// with the store the run's config names (ckpt.s3_endpoint).
TEST_F(RegistryS3, ARunOnS3DataRecordsItsLineageFromTheStore) {
  auto run = testing::MakeTestRun(1, 32, 2, 32);
  auto store = ckpt::OpenStorage("s3://models/data/web", {.endpoint = moto_->endpoint});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string prepare =
      R"({"format": "tern-prepare", "vocab_size": 300, "content": {"train": "00112233aabbccdd"}})";
  ASSERT_TRUE((*store)->Put("prepare.json", prepare).ok());
  testing::WriteFile(run->dir / "config.yaml",
                     "data:\n  dir: s3://models/data/web\nckpt:\n  s3_endpoint: " + moto_->endpoint + "\n");
  auto src = ReadModelSource(run->dir.path());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ(src->data.value("dir", ""), "s3://models/data/web") << src->data.dump();
  EXPECT_EQ(src->data.value("content", ""), "00112233aabbccdd") << src->data.dump();
  EXPECT_EQ(src->data["prepare"].value("vocab_size", 0), 300);
}

}  // namespace
}  // namespace tern::registry
