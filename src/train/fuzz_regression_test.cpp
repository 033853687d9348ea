// Inputs the fuzzers (fuzz/README.md) found that crashed a parser of the trainer's: each must now be a clear
// error. One test per finding, named after the harness that found it.
#include <gtest/gtest.h>

#include <string>

#include "train/train_config.h"
#include "train/trainer_state.h"

namespace tern {
namespace {

// train_config: a key that is a list or a mapping made yaml-cpp's as<std::string>() throw through
// LoadTrainConfigFile (`tern train` died of an uncaught YAML::TypedBadConversion).
TEST(FuzzRegression, TrainConfigKeyThatIsAListOrMapping) {
  for (const char* yaml :
       {"[a, b]: 1\n", "model:\n  ? [a]\n  : 1\n", "{x: 1}: 2\n", "run:\n  ? {a: b}\n  : c\n"}) {
    TrainConfig cfg;
    Status st = ParseTrainConfigYaml(yaml, "cfg.yaml", &cfg);
    ASSERT_FALSE(st.ok()) << yaml;
    EXPECT_NE(st.message().find("cfg.yaml"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("keys must be plain words"), std::string::npos) << st.message();
  }
}

// checkpoint_json: trainer.json that is not an object, or whose config values, data counts or sections have
// another type, made nlohmann throw out of RestoreTrainState (`tern train --resume` died). The first input
// is the fuzzer's own (a number followed by NULs and junk).
TEST(FuzzRegression, CheckpointJsonTrainerStateOfTheWrongShape) {
  const std::string found_by_fuzzer(
      "92233725\0\0\0"
      "01844674407370956\"51em51([",
      37);
  for (const std::string text :
       {found_by_fuzzer, std::string("[]"), std::string(R"({"format":"tern-trainer-state"})"),
        std::string(R"({"format":"tern-trainer-state","config":{"a":1},"data":{},"loader":{}})"),
        std::string(R"({"format":"tern-trainer-state","config":[1],"data":{},"loader":{}})"),
        std::string(R"({"format":"tern-trainer-state","config":{},"data":{"train_tokens":"x"},"loader":{}})"),
        std::string(R"({"format":"tern-trainer-state","config":{},"data":{},"loader":7})")}) {
    auto t = ParseTrainerState(text, "ck");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), Status::Code::kCorruption) << t.status().ToString();
    EXPECT_NE(t.status().message().find("ck/trainer.json"), std::string::npos) << t.status().message();
  }
  auto good = ParseTrainerState(
      R"({"format":"tern-trainer-state","step":4,"config":{"train.steps":"4"},"data":{"train_tokens":100},)"
      R"("loader":{"epoch":1,"index":2}})",
      "ck");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->progress.step, 4);
  EXPECT_EQ(good->progress.adam_t, 4);
  EXPECT_EQ(good->config.at("train.steps"), "4");
  EXPECT_EQ(good->train_tokens, 100u);
  EXPECT_EQ(good->progress.loader.index, 2u);
}

// The class of fuzz/bench_json's finding (a double beyond an integer's range, converted with undefined
// behaviour) in trainer.json's counts: each is a clear error naming the key.
TEST(FuzzRegression, TrainerStateCountsThatAreNotWholeNumbers) {
  for (const char* bad :
       {R"({"format": "tern-trainer-state", "step": 1e300})",
        R"({"format": "tern-trainer-state", "step": 2, "loader": {"index": 59223372036854775807}})",
        R"({"format": "tern-trainer-state", "step": 2, "data": {"train_tokens": 1.5}})",
        R"({"format": "tern-trainer-state", "step": 2, "loss_scale": {"good_steps": -1e40}})"}) {
    auto r = ParseTrainerState(bad, "ckpt/step_2");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("not a whole number"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tern
