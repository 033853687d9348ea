// The one preset table: names and aliases resolve to the same shapes, the GPT-2 family's parameter counts,
// and an unknown name is an error listing every name and alias.
#include <gtest/gtest.h>

#include "model/gpt_config.h"

namespace tern {
namespace {

TEST(GptPresets, NamesAndAliasesResolveToTheSameShape) {
  EXPECT_EQ(GptPreset("gpt2-1.5b").value().ToString(), GptPreset("gpt2-1558m").value().ToString());
  EXPECT_EQ(GptPreset("gpt2").value().ToString(), GptPreset("gpt2-124m").value().ToString());
  EXPECT_EQ(GptPreset("gpt2-1558m").value().ToString(), "L48 H25 C1600 V50257 T1024");
  // Every entry is a valid shape, and every name and alias finds its own entry.
  for (const GptPresetEntry& p : GptPresets()) {
    EXPECT_TRUE(p.cfg.Validate().ok()) << p.name;
    EXPECT_EQ(GptPreset(p.name).value().ToString(), p.cfg.ToString());
    for (const std::string& a : p.aliases) EXPECT_EQ(GptPreset(a).value().ToString(), p.cfg.ToString()) << a;
  }
  EXPECT_EQ(GptPresetNames(), (std::vector<std::string>{"gpt2-124m", "gpt2", "gpt2-350m", "gpt2-774m",
                                                        "gpt2-1558m", "gpt2-1.5b"}));
}

TEST(GptPresets, ParameterCountsAreTheGpt2Family) {
  EXPECT_EQ(GptParamCount(GptPreset("gpt2-124m").value()), 124439808u);
  EXPECT_NEAR(static_cast<double>(GptParamCount(GptPreset("gpt2-350m").value())), 354.8e6, 1e6);
  EXPECT_NEAR(static_cast<double>(GptParamCount(GptPreset("gpt2-774m").value())), 774.0e6, 1e6);
  EXPECT_NEAR(static_cast<double>(GptParamCount(GptPreset("gpt2-1.5b").value())), 1557.6e6, 1e6);
}

TEST(GptPresets, UnknownNameListsNamesAndAliases) {
  const Result<GptConfig> r = GptPreset("gpt3");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "unknown model preset 'gpt3'; use one of: gpt2-124m (gpt2), gpt2-350m, gpt2-774m, gpt2-1558m "
            "(gpt2-1.5b)");
}

}  // namespace
}  // namespace tern
