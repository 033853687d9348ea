// The registry over a local directory and over fault-injecting storage: register, dedupe, aliases and their
// history, tamper detection (blob, manifest, signature), and that a failed register leaves no version.
#include "registry/registry.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/fault_storage.h"
#include "ckpt/local_storage.h"
#include "infer/weights.h"
#include "metrics/run_record.h"
#include "model/init.h"
#include "model/safetensors.h"
#include "registry/digest.h"
#include "testing/test_run.h"

namespace tern::registry {
namespace {
namespace fs = std::filesystem;
using testing::TempDir;

// One tiny run directory shared by the tests (training a tokenizer takes a moment).
const testing::TestRun& TinyRun() {
  static auto run = testing::MakeTestRun(1, 32, 2, 32);
  return *run;
}

ModelRef Ref(const std::string& text) {
  auto r = ParseModelRef(text);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : ModelRef{};
}

ModelSource Source() {
  auto s = ReadModelSource(TinyRun().dir.path());
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : ModelSource{};
}

struct Fixture {
  TempDir dir;
  double clock = 1'800'000'000.0;  // 2027-01-15
  std::unique_ptr<Registry> reg;
  explicit Fixture(std::string key = "") { reg = OpenReg(std::move(key)); }
  std::unique_ptr<Registry> OpenReg(std::string key) {
    RegistryOptions o;
    o.location = dir / "reg";
    o.key = std::move(key);
    o.now = [this] { return clock; };
    auto r = Registry::Open(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r).value();
  }
  Entry Register(const std::string& name, const std::string& alias = "", const std::string& parent = "") {
    auto src = ReadModelSource(TinyRun().dir.path());
    EXPECT_TRUE(src.ok()) << src.status().ToString();
    auto e = reg->Register(*src, {name, alias, "a note", parent});
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? *e : Entry{};
  }
  size_t BlobCount() {
    size_t n = 0;
    for (auto& f : fs::directory_iterator(dir / "reg/blobs/sha256"))
      if (f.path().filename().string().find(".tmp") == std::string::npos) n++;
    return n;
  }
};

TEST(Registry, RegisterStoresTheWeightsByHashAndServesThemBack) {
  Fixture f;
  Entry e = f.Register("tiny", "production");
  EXPECT_EQ(e.version, 1);
  const std::string weights = testing::ReadFile(TinyRun().dir / "model.safetensors");
  EXPECT_EQ(e.manifest["files"]["model.safetensors"]["sha256"], Sha256Hex(weights));
  EXPECT_EQ(e.manifest["model"]["n_embd"], 32);
  EXPECT_EQ(e.manifest["source"]["kind"], "run_dir");
  EXPECT_TRUE(fs::exists(f.dir / ("reg/blobs/sha256/" + Sha256Hex(weights))));
  auto path = f.reg->Materialize(Ref("tiny@production"));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto w = LoadModelWeights(*path);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->params, TinyRun().params);
  EXPECT_EQ(w->name, "tiny");
}

// The version's metrics are the run's summary.json: the losses, tokens and $, and with eval.choices the
// accuracy on that set.
// A LoRA run registers its adapters beside the merged model; a version resolved for serving holds them, so
// `tern serve BASE --lora NAME=models:/NAME@REF` serves them over the base. A run without has none.
TEST(Registry, ALoraRunsAdaptersAreStoredAndMaterialized) {
  TempDir dir;
  fs::copy(TinyRun().dir.path(), dir / "run", fs::copy_options::recursive);
  const LoraAdapter a = testing::RandomLoraAdapter(TinyRun(), 2, kLoraQkv, 4.0f, 9);
  ASSERT_TRUE(WriteLoraAdapter(dir / "run/adapter.safetensors", a).ok());
  Fixture f;
  auto src = ReadModelSource(dir / "run");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  auto e = f.reg->Register(*src, {"ft", "production", "", ""});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  const std::string bytes = testing::ReadFile(dir / "run/adapter.safetensors");
  EXPECT_EQ(e->manifest["files"]["adapter.safetensors"]["sha256"], Sha256Hex(bytes));
  auto path = f.reg->Materialize(Ref("ft@production"));
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  auto back = LoadLoraAdapter(*path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->params, a.params);
  EXPECT_EQ(back->base_fingerprint, a.base_fingerprint);

  Entry plain = f.Register("plain");
  EXPECT_FALSE(plain.manifest["files"].contains("adapter.safetensors"));
  auto plain_dir = f.reg->Materialize(Ref("plain"));
  ASSERT_TRUE(plain_dir.ok());
  EXPECT_FALSE(fs::exists(fs::path(*plain_dir) / "adapter.safetensors"));

  // A damaged adapter file is refused at registration, not found later by the server.
  testing::WriteFile(dir / "run/adapter.safetensors", bytes.substr(0, bytes.size() / 2));
  EXPECT_FALSE(ReadModelSource(dir / "run").ok());
}

TEST(Registry, TheMetricsAreTheRunsSummaryWithItsChoiceAccuracy) {
  TempDir dir;
  fs::copy(TinyRun().dir.path(), dir / "run", fs::copy_options::recursive);
  EndRecord end;
  end.steps = 40;
  end.val_loss = 3.25;
  end.tokens = 1024;
  end.choice_acc = 0.375;
  end.choice_acc_norm = 0.5;
  testing::WriteFile(dir / "run/summary.json", ToJson(end).dump());
  auto src = ReadModelSource(dir / "run");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ(src->metrics["val_loss"], 3.25);
  EXPECT_EQ(src->metrics["choice_acc"], 0.375);
  EXPECT_EQ(src->metrics["choice_acc_norm"], 0.5);
  EXPECT_FALSE(src->metrics.contains("val_loss_mix"));
  end.choice_acc.reset();
  end.choice_acc_norm.reset();
  end.val_loss_mix = {{"data/kjv", 4.5}, {"data/docs", 3.75}};  // data.mix: each dataset's own
  testing::WriteFile(dir / "run/summary.json", ToJson(end).dump());
  src = ReadModelSource(dir / "run");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_FALSE(src->metrics.contains("choice_acc")) << "no eval.choices, no column";
  EXPECT_EQ(src->metrics["val_loss_mix"], (nlohmann::json{{"data/kjv", 4.5}, {"data/docs", 3.75}}));
}

TEST(Registry, SameWeightsTwiceStoreOneBlobAndTwoVersions) {
  Fixture f;
  f.Register("tiny");
  Entry v2 = f.Register("tiny", "", "tiny@1");
  EXPECT_EQ(v2.version, 2);
  EXPECT_EQ(v2.manifest["parent"], "tiny@1");
  EXPECT_EQ(f.BlobCount(), 2u);  // the weights and the tokenizer, once each
  auto all = f.reg->List("tiny");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2u);
  auto latest = f.reg->Get(Ref("tiny"));
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->version, 2);
}

TEST(Registry, AliasMovesAreRecordedAndHistoryAtAnswersThePast) {
  Fixture f;
  f.Register("tiny", "production");  // t0: production -> 1
  const double t0 = f.clock;
  f.clock += 60;
  f.Register("tiny");
  f.clock += 60;
  ASSERT_TRUE(f.reg->SetAlias("tiny", 2, "production").ok());  // t0+120: production -> 2
  f.clock += 60;
  ASSERT_TRUE(f.reg->SetAlias("tiny", 1, "production").ok());  // t0+180: rolled back to 1
  auto now = f.reg->Get(Ref("tiny@production"));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->version, 1);
  auto at = [&](double t) {
    auto a = f.reg->AliasesAt("tiny", t);
    EXPECT_TRUE(a.ok());
    return a->empty() ? 0 : a->front().version;
  };
  EXPECT_EQ(at(t0 - 1), 0);  // before it existed
  EXPECT_EQ(at(t0 + 30), 1);
  EXPECT_EQ(at(t0 + 150), 2);
  EXPECT_EQ(at(t0 + 200), 1);
  auto history = f.reg->History("tiny");
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 3u);
  EXPECT_EQ(history->at(1).moved_utc, FormatUtc(t0 + 120));
  // The UTC text a user types reaches the same answer.
  auto parsed = ParseUtc(FormatUtc(t0 + 150));
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(at(*parsed), 2);
  EXPECT_FALSE(f.reg->SetAlias("tiny", 9, "production").ok());  // no such version
  EXPECT_FALSE(f.reg->SetAlias("tiny", 1, "42").ok());          // a number would read as a version
}

TEST(Registry, AFlippedByteInTheBlobIsRefused) {
  Fixture f;
  Entry e = f.Register("tiny");
  const std::string sha = e.manifest["files"]["model.safetensors"]["sha256"];
  const std::string blob = f.dir / ("reg/blobs/sha256/" + sha);
  std::string bytes = testing::ReadFile(blob);
  bytes[bytes.size() / 2] ^= 1;
  testing::WriteFile(blob, bytes);
  auto path = f.reg->Materialize(Ref("tiny@1"));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), Status::Code::kCorruption);
  EXPECT_NE(path.status().message().find(sha), std::string::npos) << path.status().message();
  // Registering the good weights again repairs the blob.
  f.Register("tiny");
  EXPECT_TRUE(f.reg->Materialize(Ref("tiny@1")).ok());
}

TEST(Registry, AnEditedManifestIsRefused) {
  Fixture f;
  f.Register("tiny");
  const std::string mpath = f.dir / "reg/models/tiny/v1/manifest.json";
  std::string text = testing::ReadFile(mpath);
  text.replace(text.find("a note"), 6, "b note");
  testing::WriteFile(mpath, text);
  auto e = f.reg->Get(Ref("tiny@1"));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("manifest"), std::string::npos) << e.status().message();
}

TEST(Registry, ASignedEntryNeedsTheRightKey) {
  Fixture f("the right key");
  Entry e = f.Register("tiny", "production");
  EXPECT_TRUE(e.signed_entry);
  EXPECT_EQ(e.manifest["signature"]["alg"], "HMAC-SHA256");
  EXPECT_TRUE(f.reg->Get(Ref("tiny@production")).ok());

  auto wrong = f.OpenReg("a wrong key")->Get(Ref("tiny@production"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("signature check failed"), std::string::npos)
      << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("wrong key"), std::string::npos) << wrong.status().message();

  auto none = f.OpenReg("")->Materialize(Ref("tiny@production"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--key-file"), std::string::npos) << none.status().message();
}

TEST(Registry, BadInputOrAFailedStoreLeavesNoVersion) {
  Fixture f;
  f.Register("tiny");
  // A run directory whose weights do not load is refused before anything is written.
  TempDir bad;
  testing::WriteFile(bad / "model.safetensors", "not safetensors");
  testing::WriteFile(bad / "tokenizer.model", testing::ReadFile(TinyRun().dir / "tokenizer.model"));
  EXPECT_FALSE(ReadModelSource(bad.path()).ok());
  EXPECT_FALSE(f.reg->Register(ModelSource{}, {"tiny", "", "", ""}).ok());
  EXPECT_FALSE(f.reg->Register(Source(), {"tiny", "", "", "tiny@7"}).ok());

  // The store fails while publishing the manifest: no version 2, and version 1 is intact.
  auto base = ckpt::LocalStorage::Open(f.dir / "reg");
  ASSERT_TRUE(base.ok());
  auto faulty = std::make_unique<ckpt::FaultInjectionStorage>(base->get());
  ckpt::FaultInjectionStorage* fault = faulty.get();
  fault->FailCalls(ckpt::FaultInjectionStorage::kPut, "manifest.json",
                   Status::IoError("injected: no space left on device"));
  RegistryOptions o;
  auto reg = Registry::Open(std::move(faulty), f.dir / "reg/index.sqlite", o);
  ASSERT_TRUE(reg.ok());
  auto failed = (*reg)->Register(Source(), {"tiny", "production", "", ""});
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos);
  fault->ClearFailures();
  auto list = (*reg)->List("tiny");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 1u);
  EXPECT_FALSE(fs::exists(f.dir / "reg/models/tiny/v2/manifest.json"));
  EXPECT_FALSE((*reg)->Get(Ref("tiny@production")).ok());  // the alias was not set either
  EXPECT_TRUE((*reg)->Materialize(Ref("tiny@1")).ok());
  // The next register takes version 2.
  auto next = (*reg)->Register(Source(), {"tiny", "", "", ""});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->version, 2);
}

TEST(Registry, RefsAndTimesParseAndWrongOnesAreRefused) {
  EXPECT_FALSE(ParseModelRef("bad/name").ok());
  EXPECT_EQ(Ref("m@12").version, 12);
  EXPECT_EQ(Ref("m@prod").alias, "prod");
  EXPECT_FALSE(ParseUtc("yesterday").ok());
  EXPECT_DOUBLE_EQ(ParseUtc("2026-12-02T00:40:00Z").value(), 1796172000.0);
  EXPECT_DOUBLE_EQ(ParseUtc("2026-12-02").value(), 1796169600.0);
}

}  // namespace
}  // namespace tern::registry
