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
  for (const std::string& text :
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

// train_config's round-trip check: a quoted multi-line run.dir holding a 0xff byte and a NUL validated, but
// the config.yaml tern writes from it (what a resume reads) did not read back the same. Values that are not
// UTF-8 text, or hold control characters, are now refused naming the key; the input that found it is
// fuzz/train_config/corpus/regress_roundtrip_non_utf8_multiline.yaml, and text that is allowed (other
// scripts, tabs, newlines) reads back the same.
TEST(FuzzRegression, TrainConfigValuesThatAreNotTextAreRefusedAndTextRoundTrips) {
  const std::string head = "model:\n  n_layer: 1\n  n_head: 1\n  n_embd: 8\ndata:\n  dir: data/x\n";
  struct Case {
    std::string yaml, says;
  };
  for (const Case& c : {
           Case{head + "run:\n  dir: \"runed/x\ntrain:\n  seq_len: 16\n \xff" + std::string(1, '\0') +
                    " total\"\n",
                "(0xff) is a control character or not UTF-8 text"},
           Case{head + "run:\n  dir: \"a\\0b\"\n", "config key 'run.dir': byte 1 of its value (0x00)"},
           Case{head + "sample:\n  prompt: \"caf\xc3\"\n", "config key 'sample.prompt': byte 3"},
           Case{head + "sample:\n  prompt: \"\\x1b[31m\"\n", "is a control character or not UTF-8 text"},
       }) {
    TrainConfig cfg;
    Status st = ParseTrainConfigYaml(c.yaml, "cfg.yaml", &cfg);
    ASSERT_FALSE(st.ok()) << c.yaml;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
  }
  TrainConfig over;
  Status st = ApplyOverride("run.dir=runs/\xfe", &over);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("config key 'run.dir'"), std::string::npos) << st.message();

  TrainConfig cfg;
  ASSERT_TRUE(
      ParseTrainConfigYaml(head + "run:\n  dir: \"runs/Привет 世界 🚀\"\nsample:\n  prompt: \"Q:\\tx\\nA:\"\n",
                           "cfg.yaml", &cfg)
          .ok());
  EXPECT_EQ(cfg.sample_prompt, "Q:\tx\nA:");
  TrainConfig back;
  ASSERT_TRUE(ParseTrainConfigYaml(TrainConfigToYaml(cfg), "config.yaml", &back).ok());
  EXPECT_EQ(TrainConfigValues(back), TrainConfigValues(cfg));
}

}  // namespace
}  // namespace tern
