// The registry parses every key with a fixed set of names into its enum once: a good name gives the enum
// value, a bad one an error naming the key and every allowed name; the YAML and the values a checkpoint
// records print the names back.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "train/run_setup.h"
#include "train/train_config.h"

namespace tern {
namespace {

// Each enum-valued key with the message a bad value gets.
struct EnumKey {
  const char* key;
  const char* allowed;  // as the error lists them
};

constexpr EnumKey kEnumKeys[] = {
    {"train.precision", "fp32, bf16, fp16"},    {"train.device", "cpu, cpu-ref, cuda, auto"},
    {"train.recompute", "none, gelu"},          {"train.schedule", "cosine, constant"},
    {"train.attention", "naive, flash, cudnn"}, {"ckpt.when_busy", "wait, skip"},
    {"ckpt.on_error", "continue, stop"},        {"ckpt.on_notice", "finish, abandon"},
    {"ckpt.notice_kind", "aws, gcp"},
};

TEST(TrainConfigEnums, BadValueNamesTheKeyAndTheAllowedValues) {
  for (const EnumKey& k : kEnumKeys) {
    TrainConfig c;
    const Status st = ApplyOverride(std::string(k.key) + "=bf61", &c);
    ASSERT_FALSE(st.ok()) << k.key;
    EXPECT_NE(st.message().find(std::string(k.key) + ": 'bf61' is not one of " + k.allowed),
              std::string::npos)
        << st.message();
  }
  TrainConfig c;
  EXPECT_EQ(ParsePrecision("bf61").status().message(),
            "train.precision: 'bf61' is not one of fp32, bf16, fp16");
  EXPECT_EQ(ParseDevice("tpu").status().message(),
            "train.device: 'tpu' is not one of cpu, cpu-ref, cuda, auto");
  // An empty value is not a name either.
  EXPECT_NE(ApplyOverride("train.precision=", &c).message().find("train.precision: '' is not one of"),
            std::string::npos);
}

TEST(TrainConfigEnums, GoodValuesParseIntoTheEnums) {
  TrainConfig c;
  for (const char* kv : {"train.precision=bf16", "train.device=cpu-ref", "train.recompute=gelu",
                         "train.schedule=constant", "cuda.attention=flash", "ckpt.when_busy=skip",
                         "ckpt.on_error=stop", "ckpt.on_notice=abandon", "ckpt.notice_kind=gcp"}) {
    ASSERT_TRUE(ApplyOverride(kv, &c).ok()) << kv;
  }
  EXPECT_EQ(c.precision, TrainPrecision::kBf16);
  EXPECT_EQ(c.device, TrainDevice::kCpuRef);
  EXPECT_EQ(c.recompute, Recompute::kGelu);
  EXPECT_EQ(c.schedule, LrScheduleKind::kConstant);
  EXPECT_EQ(c.attention, AttentionKind::kFlash);  // cuda.attention: the key's older name still reads
  EXPECT_EQ(c.ckpt.when_busy, WhenBusy::kSkip);
  EXPECT_EQ(c.ckpt.on_error, OnSaveError::kStop);
  EXPECT_EQ(c.ckpt.on_notice, OnNotice::kAbandon);
  EXPECT_EQ(c.ckpt.notice_kind, NoticeKind::kGcp);
  ASSERT_TRUE(ApplyOverride("train.precision=fp16", &c).ok());
  EXPECT_EQ(c.precision, TrainPrecision::kFp16);
  ASSERT_TRUE(ApplyOverride("train.device=cuda", &c).ok());
  EXPECT_EQ(c.device, TrainDevice::kCuda);
  EXPECT_EQ(ParseDevice("auto").value(), TrainDevice::kAuto);
  EXPECT_EQ(ParsePrecision("fp32").value(), TrainPrecision::kFp32);

  // The names come back out: in the values a checkpoint compares on resume, and in --list-keys.
  std::map<std::string, std::string> values;
  for (const auto& [k, v] : TrainConfigValues(c)) values[k] = v;
  EXPECT_EQ(values["train.precision"], "fp16");
  EXPECT_EQ(values["train.device"], "cuda");
  EXPECT_EQ(values["ckpt.on_notice"], "abandon");
  EXPECT_EQ(values["ckpt.notice_kind"], "gcp");
  EXPECT_NE(DescribeTrainConfigKeys(TrainConfig{}).find("[fp32 | bf16 | fp16]"), std::string::npos);
  EXPECT_STREQ(PrecisionName(TrainPrecision::kBf16), "bf16");
  EXPECT_STREQ(DeviceName(TrainDevice::kCpuRef), "cpu-ref");
  EXPECT_STREQ(LrScheduleName(LrScheduleKind::kCosine), "cosine");
  ASSERT_TRUE(ApplyOverride("train.attention=naive", &c).ok());
  EXPECT_EQ(c.attention, AttentionKind::kNaive);
  EXPECT_EQ(values["train.attention"], "flash");
  EXPECT_EQ(values.count("cuda.attention"), 0u);
  EXPECT_STREQ(NoticeKindName(NoticeKind::kAws), "aws");
}

TEST(TrainConfigEnums, ResumeIsAutoNoneOrAPath) {
  TrainConfig c;
  EXPECT_EQ(c.ckpt.resume.mode, ResumeFrom::Mode::kNone);
  ASSERT_TRUE(ApplyOverride("ckpt.resume=auto", &c).ok());
  EXPECT_EQ(c.ckpt.resume.mode, ResumeFrom::Mode::kAuto);
  ASSERT_TRUE(ApplyOverride("ckpt.resume=s3://bucket/run/step_00000010", &c).ok());
  EXPECT_EQ(c.ckpt.resume.mode, ResumeFrom::Mode::kPath);
  EXPECT_EQ(c.ckpt.resume.path, "s3://bucket/run/step_00000010");
  EXPECT_EQ(c.ckpt.resume.ToString(), "s3://bucket/run/step_00000010");
  ASSERT_TRUE(ApplyOverride("ckpt.resume=none", &c).ok());
  EXPECT_EQ(c.ckpt.resume.ToString(), "none");
  EXPECT_NE(
      ApplyOverride("ckpt.resume=", &c).message().find("ckpt.resume is empty: use auto, none or a path"),
      std::string::npos);
  c.ckpt.resume = ResumeFrom::Path("");
  c.data_dir = "x";
  EXPECT_NE(c.Validate().message().find("ckpt.resume is empty"), std::string::npos);
}

// The YAML written into a run directory loads back to the same enums.
TEST(TrainConfigEnums, YamlRoundTripKeepsTheEnums) {
  TrainConfig c;
  for (const char* kv :
       {"train.precision=bf16", "train.schedule=constant", "ckpt.on_error=stop", "ckpt.resume=auto"})
    ASSERT_TRUE(ApplyOverride(kv, &c).ok()) << kv;
  const std::string yaml = TrainConfigToYaml(c);
  EXPECT_NE(yaml.find("precision: bf16"), std::string::npos) << yaml;
  const std::string path = ::testing::TempDir() + "/tern_train_config_test.yaml";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(yaml.c_str(), f);
    std::fclose(f);
  }
  TrainConfig back;
  ASSERT_TRUE(LoadTrainConfigFile(path, &back).ok());
  EXPECT_EQ(back.precision, TrainPrecision::kBf16);
  EXPECT_EQ(back.schedule, LrScheduleKind::kConstant);
  EXPECT_EQ(back.ckpt.on_error, OnSaveError::kStop);
  EXPECT_EQ(back.ckpt.resume.mode, ResumeFrom::Mode::kAuto);
  EXPECT_EQ(TrainConfigValues(back), TrainConfigValues(c));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tern

namespace tern {
namespace {

// train.attention reaches the backend the trainer builds (the model sizes its attention state by it), and a
// backend without the kernel is an error naming what it has.
TEST(RunSetup, AttentionKindReachesTheBackendOrNamesWhatItHas) {
  TrainConfig c;
  ASSERT_TRUE(ApplyOverride("train.attention=flash", &c).ok());
  ASSERT_TRUE(ApplyOverride("train.device=cpu", &c).ok());
  Result<RunSetup> fast = MakeRunSetup(c);
  ASSERT_TRUE(fast.ok()) << fast.status().message();
  EXPECT_EQ(fast->backend->attention_kind(), AttentionKind::kFlash);
  ASSERT_TRUE(ApplyOverride("train.precision=fp16", &c).ok());  // through the fp16 emulation decorator
  Result<RunSetup> f16 = MakeRunSetup(c);
  ASSERT_TRUE(f16.ok()) << f16.status().message();
  EXPECT_EQ(f16->backend->attention_kind(), AttentionKind::kFlash);
  ASSERT_TRUE(ApplyOverride("train.device=cpu-ref", &c).ok());
  Result<RunSetup> ref = MakeRunSetup(c);
  ASSERT_FALSE(ref.ok());
  EXPECT_NE(ref.status().message().find("train.attention=flash is not available on cpu-ref"),
            std::string::npos)
      << ref.status().message();
  EXPECT_NE(ref.status().message().find("(it has naive)"), std::string::npos) << ref.status().message();
  // cuDNN's fused attention is the CUDA backend's: on the CPU the error says so
  ASSERT_TRUE(ApplyOverride("train.attention=cudnn", &c).ok());
  ASSERT_TRUE(ApplyOverride("train.device=cpu", &c).ok());
  Result<RunSetup> cpu = MakeRunSetup(c);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("train.attention=cudnn is not available on cpu"), std::string::npos)
      << cpu.status().message();
}

}  // namespace
}  // namespace tern
