// `tern models` and models:/ URIs through the built tern binary, as a user runs them: register twice, move
// the production alias, read the history, diff, and `tern generate models:/tiny@production` producing the
// same text as the run directory; a signed entry without its key or with a wrong one is refused.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/test_run.h"
#include "testing/tiny_config.h"

namespace {
using tern::testing::TempDir;

struct CmdResult {
  int code;
  std::string output;  // stdout and stderr
};

class RegistryCli : public ::testing::Test {
 protected:
  void SetUp() override { run_ = tern::testing::MakeTestRun(1, 32, 2, 32); }

  // `env` is prepended to the command ("TERN_REGISTRY_KEY_FILE=... ").
  CmdResult Tern(const std::string& args, const std::string& env = "") {
    const char* b = std::getenv("TERN_BINARY_DIR");
    const std::string cmd = "TERN_HOME=" + home_.path() + " TERN_REGISTRY= TERN_REGISTRY_KEY_FILE= " + env +
                            " OMP_NUM_THREADS=1 " + (b ? b : TERN_TEST_BINARY_DIR) + "/tern " + args +
                            " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  nlohmann::json Json(const std::string& args) {
    CmdResult r = Tern(args + " --json");
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    return j;
  }

  TempDir home_;
  std::unique_ptr<tern::testing::TestRun> run_;
};

TEST_F(RegistryCli, RegisterAliasHistoryDiffAndGenerateFromAModelsUri) {
  const std::string run = run_->dir.path();
  tern::testing::WriteFile(run + "/config.yaml", "model:\n  n_layer: 1\ntrain:\n  lr: 0.001\n");
  nlohmann::json v1 = Json("models register " + run + " --name tiny --alias production --note first");
  EXPECT_EQ(v1["version"], 1);
  EXPECT_EQ(v1["manifest"]["config"]["train.lr"], 0.001);
  tern::testing::WriteFile(run + "/config.yaml", "model:\n  n_layer: 1\ntrain:\n  lr: 0.002\n");
  nlohmann::json v2 = Json("models register " + run + " --name tiny --parent tiny@production");
  EXPECT_EQ(v2["version"], 2);
  EXPECT_EQ(v2["manifest"]["parent"], "tiny@1");

  // One blob for the weights of both versions (and one for the tokenizer).
  int blobs = 0;
  for (auto& f : std::filesystem::directory_iterator(home_ / "registry/blobs/sha256"))
    blobs += !f.is_directory();
  EXPECT_EQ(blobs, 2);

  nlohmann::json moved = Json("models alias tiny@2 production");
  EXPECT_EQ(moved["version"], 2);
  nlohmann::json history = Json("models history tiny");
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0]["version"], 1);
  EXPECT_EQ(history[1]["version"], 2);
  // At the first move's time, production was version 1.
  nlohmann::json past = Json("models history tiny --at " + history[0]["moved_utc"].get<std::string>());
  ASSERT_EQ(past["aliases"].size(), 1u);
  EXPECT_EQ(past["aliases"][0]["version"], 1);

  nlohmann::json ls = Json("models ls");
  ASSERT_EQ(ls.size(), 2u);
  EXPECT_EQ(ls[1]["aliases"][0], "production");
  nlohmann::json diff = Json("models diff tiny@1 tiny@production");
  bool lr_differs = false;
  for (const auto& d : diff["differences"]) {
    EXPECT_NE(d["key"], "files.model.safetensors.sha256");  // the same weights
    lr_differs |= d["key"] == "config.train.lr";
  }
  EXPECT_TRUE(lr_differs) << diff.dump(2);
  EXPECT_EQ(Json("models show tiny@production")["version"], 2);

  // The same text from the registry as from the run directory (greedy decoding).
  const std::string gen = " --prompt 'In the beginning' --max-tokens 8 --temperature 0";
  CmdResult direct = Tern("generate " + run + gen);
  CmdResult via_uri = Tern("generate models:/tiny@production" + gen);
  ASSERT_EQ(direct.code, 0) << direct.output;
  ASSERT_EQ(via_uri.code, 0) << via_uri.output;
  EXPECT_EQ(direct.output, via_uri.output);
  EXPECT_EQ(Tern("export models:/tiny@1 --out " + home_ / "out.safetensors").code, 0);

  CmdResult missing = Tern("generate models:/nosuch" + gen);
  EXPECT_NE(missing.code, 0);
  EXPECT_NE(missing.output.find("no model named 'nosuch'"), std::string::npos) << missing.output;
}

TEST_F(RegistryCli, ASignedEntryIsRefusedWithoutItsKeyOrWithAWrongOne) {
  const std::string run = run_->dir.path();
  tern::testing::WriteFile(home_ / "key", "right key\n");
  tern::testing::WriteFile(home_ / "wrong", "wrong key\n");
  nlohmann::json v1 =
      Json("models register " + run + " --name signed --alias production --key-file " + home_ / "key");
  EXPECT_TRUE(v1["manifest"].contains("signature"));
  const std::string gen = " --prompt hi --max-tokens 2 --temperature 0";
  EXPECT_EQ(Tern("generate models:/signed@production" + gen, "TERN_REGISTRY_KEY_FILE=" + home_ / "key").code,
            0);

  CmdResult none = Tern("generate models:/signed@production" + gen);
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.output.find("is signed"), std::string::npos) << none.output;
  CmdResult wrong = Tern("models show signed --key-file " + home_ / "wrong");
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.output.find("signature check failed"), std::string::npos) << wrong.output;

  // A tampered manifest (note changed) is refused even with the right key.
  const std::string mpath = home_ / "registry/models/signed/v1/manifest.json";
  std::string text = tern::testing::ReadFile(mpath);
  text.replace(text.find("\"note\": \"\""), 10, "\"note\": \"x\"");
  tern::testing::WriteFile(mpath, text);
  CmdResult tampered = Tern("models show signed@1 --key-file " + home_ / "key");
  EXPECT_NE(tampered.code, 0);
  EXPECT_NE(tampered.output.find("tampered"), std::string::npos) << tampered.output;
}

// A run trained by `tern train` (a few steps, a checkpoint every 5): registering it records the data
// fingerprint and the metrics; its checkpoint registers too, and generates what the run directory generates.
TEST_F(RegistryCli, ATrainedRunAndItsCheckpointRegisterWithDataAndMetrics) {
  const std::string data = tern::testing::SharedSmallPreparedData();
  ASSERT_FALSE(data.empty());
  const std::string run = home_ / "trained";
  tern::testing::WriteFile(home_ / "tiny.yaml",
                           tern::testing::TinyTrainYaml(data, {.batch_size = 2,
                                                               .warmup_steps = 2,
                                                               .lr = "3.0e-3",
                                                               .eval_every = 5,
                                                               .run_dir = run,
                                                               .more = "ckpt: {every: 5}\n"}));
  CmdResult train = Tern("train " + home_ / "tiny.yaml --quiet");
  ASSERT_EQ(train.code, 0) << train.output;

  nlohmann::json v1 = Json("models register " + run + " --name trained");
  const nlohmann::json& m = v1["manifest"];
  EXPECT_EQ(m["data"]["prepare_sha256"].get<std::string>().size(), 64u) << m.dump(2);
  EXPECT_EQ(m["data"]["content"], m["data"]["prepare"]["content"]["train"]) << m.dump(2);
  EXPECT_EQ(m["data"]["content"].get<std::string>().size(), 16u) << m.dump(2);
  EXPECT_TRUE(m["metrics"]["val_loss"].is_number()) << m.dump(2);
  EXPECT_EQ(m["metrics"]["steps"], 10);
  EXPECT_EQ(m["config"]["train.steps"], 10);

  nlohmann::json v2 =
      Json("models register " + run + "/checkpoints/step_00000010 --name trained --parent trained@1");
  EXPECT_EQ(v2["manifest"]["source"]["kind"], "checkpoint");
  EXPECT_EQ(v2["manifest"]["source"]["run_dir"], run);
  EXPECT_EQ(v2["manifest"]["data"]["prepare_sha256"], m["data"]["prepare_sha256"]);

  const std::string gen = " --prompt 'In the beginning' --max-tokens 6 --temperature 0";
  CmdResult direct = Tern("generate " + run + gen);
  CmdResult from_ckpt = Tern("generate models:/trained@2" + gen);
  ASSERT_EQ(direct.code, 0) << direct.output;
  EXPECT_EQ(direct.output, from_ckpt.output);
  CmdResult exported = Tern("ckpt export models:/trained@2 --out " + home_ / "hf.safetensors");
  EXPECT_EQ(exported.code, 0) << exported.output;
  EXPECT_TRUE(std::filesystem::exists(home_ / "hf.safetensors"));
}

// Fine-tuning a registered model as a user does it: new text prepared with its tokenizer (`tern prepare
// --tokenizer models:/base@production`), trained from its weights (train.init_from), and registered: the new
// version's parent is the version the alias named when training started, not where it points later.
TEST_F(RegistryCli, AFineTuneOfARegisteredModelNamesItsParent) {
  const std::string data = tern::testing::SharedSmallPreparedData();
  ASSERT_FALSE(data.empty());
  const std::string base = home_ / "base";
  tern::testing::WriteFile(home_ / "base.yaml",
                           tern::testing::TinyTrainYaml(data, {.steps = 4, .lr = "3.0e-3", .run_dir = base}));
  CmdResult trained = Tern("train " + home_ / "base.yaml --quiet");
  ASSERT_EQ(trained.code, 0) << trained.output;
  Json("models register " + base + " --name base --alias production");

  tern::testing::WriteFile(home_ / "new.txt", tern::testing::MakeCorpus(20'000, 11));
  CmdResult prep =
      Tern("prepare --input " + home_ / "new.txt --out " + home_ / "new --tokenizer models:/base@production");
  ASSERT_EQ(prep.code, 0) << prep.output;
  EXPECT_NE(prep.output.find("--set train.init_from=models:/base@production"), std::string::npos)
      << prep.output;
  EXPECT_EQ(tern::testing::ReadFile(home_ / "new/tokenizer.model"),
            tern::testing::ReadFile(base + "/tokenizer.model"));

  const std::string ft = home_ / "ft";
  tern::testing::WriteFile(
      home_ / "ft.yaml",
      tern::testing::TinyTrainYaml(home_ / "new", {.steps = 2, .lr = "1.0e-3", .run_dir = ft}));
  CmdResult tuned = Tern("train " + home_ / "ft.yaml --set train.init_from=models:/base@production");
  ASSERT_EQ(tuned.code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("weights from models:/base@1"), std::string::npos) << tuned.output;
  EXPECT_NE(tern::testing::ReadFile(ft + "/config.yaml").find("init_from: models:/base@1"),
            std::string::npos);

  Json("models register " + base + " --name base --alias production");  // production moves on to v2
  nlohmann::json v = Json("models register " + ft + " --name ft");
  EXPECT_EQ(v["manifest"]["parent"], "base@1");

  // A model of another shape is refused before anything is written, with the keys to set.
  CmdResult wrong =
      Tern("train " + home_ / "ft.yaml --set train.init_from=models:/base@1 --set model.n_layer=2 " +
           "--set run.dir=" + home_ / "wrong");
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("--set model.n_layer=1"), std::string::npos) << wrong.output;
}

}  // namespace
