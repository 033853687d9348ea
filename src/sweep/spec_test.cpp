// SWEEP.yaml: what parses, the errors that name what was wrong, and sampling that a restart repeats.
#include "sweep/spec.h"

#include <gtest/gtest.h>

namespace tern::sweep {
namespace {

const char* kGood =
    "base: tiny.yaml\ndir: /tmp/s\nseed: 7\ntrials: 5\nasha: {eta: 2, min_steps: 4, max_steps: 16}\n"
    "instance: aws:us-east-1:g5.xlarge:spot\nbudget_usd: 20\n"
    "space:\n  train.lr: {loguniform: [1.0e-4, 1.0e-2]}\n  train.weight_decay: {uniform: [0, 0.2]}\n"
    "  model.n_layer: {int: [1, 3]}\n  train.schedule: {choice: [cosine, constant]}\n";

std::string ErrorOf(const std::string& text) {
  auto r = ParseSweepSpec(text, "/x/sweep.yaml");
  return r.ok() ? "" : r.status().message();
}

TEST(SweepSpec, ParsesEveryLaw) {
  auto s = ParseSweepSpec(kGood, "/x/sweep.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->base_config, "/x/tiny.yaml");
  EXPECT_EQ(s->asha.eta, 2);
  ASSERT_EQ(s->space.size(), 4u);
  EXPECT_EQ(s->space[0].kind, Param::Kind::kLogUniform);
  EXPECT_EQ(s->space[2].kind, Param::Kind::kInt);
  EXPECT_EQ(s->space[3].choices, (std::vector<std::string>{"cosine", "constant"}));
  EXPECT_EQ(TrialCount(*s), 5);
}

TEST(SweepSpec, TheObjectiveIsValLossUnlessNamed) {
  EXPECT_EQ(ParseSweepSpec(kGood, "/x/sweep.yaml")->objective, Objective::kValLoss);
  auto s = ParseSweepSpec(std::string(kGood) + "objective: choice_error_norm\n", "/x/sweep.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->objective, Objective::kChoiceErrorNorm);
  EXPECT_STREQ(ObjectiveLabel(s->objective), "choice error (1 - acc_norm)");
  EXPECT_NE(ErrorOf(std::string(kGood) + "objective: bleu\n").find("not one of val_loss, choice_error"),
            std::string::npos);
}

TEST(SweepSpec, ErrorsNameTheKeyAndWhatIsAllowed) {
  EXPECT_NE(ErrorOf("space: {a.b: {choice: [1]}}\nasha: {min_steps: 1, max_steps: 2}\ntrials: 1\n")
                .find("give base"),
            std::string::npos);
  const std::string head = "base: t.yaml\ntrials: 2\nasha: {min_steps: 2, max_steps: 8}\n";
  EXPECT_NE(
      ErrorOf(head + "space: {train.lr: {normal: [0, 1]}}\n").find("space.train.lr: unknown law 'normal'"),
      std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [1]}}\n").find("uniform needs [lo, hi]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [2, 1]}}\n").find("lo 2 is above hi 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {loguniform: [0, 1]}}\n").find("loguniform needs lo > 0"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [a, 1]}}\n").find("'a' is not a number"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {model.n_layer: {int: [1.5, 3]}}\n").find("not a whole number"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {choice: []}}\n").find("non-empty list"), std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [0, 1]}}\nsampler: grid\n")
                .find("a grid needs choice or int"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [0, 1]}}\nsampler: sobol\n")
                .find("not one of random, grid"),
            std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [0, 1]}}\nbudget: 3\n").find("budget: unknown key"),
            std::string::npos);
  EXPECT_NE(ErrorOf("base: t.yaml\ntrials: 2\nasha: {eta: 1, min_steps: 2, max_steps: 8}\n"
                    "space: {train.lr: {uniform: [0, 1]}}\n")
                .find("eta must be 2 or more"),
            std::string::npos);
  EXPECT_NE(ErrorOf("base: t.yaml\ntrials: 2\nasha: {min_steps: 9, max_steps: 8}\nspace: {train.lr: "
                    "{uniform: [0, 1]}}\n")
                .find("min_steps <= max_steps"),
            std::string::npos);
  EXPECT_NE(ErrorOf("base: [\n").find("not valid YAML"), std::string::npos);
  EXPECT_NE(ErrorOf(head + "space: {train.lr: {uniform: [0, 1]}}\ninstance: [a, b]\n").find("wrong shape"),
            std::string::npos);
}

TEST(SweepSpec, RandomSamplesArePureFunctionsOfSeedAndIndexWithinTheirRanges) {
  auto s = ParseSweepSpec(kGood, "/x/sweep.yaml");
  ASSERT_TRUE(s.ok());
  std::set<std::string> lrs;
  for (int i = 0; i < 50; i++) {
    const auto p = SampleTrial(*s, i);
    EXPECT_EQ(p, SampleTrial(*s, i));
    const double lr = std::stod(p[0].second), wd = std::stod(p[1].second);
    const int layers = std::stoi(p[2].second);
    EXPECT_TRUE(lr >= 1e-4 && lr <= 1e-2) << lr;
    EXPECT_TRUE(wd >= 0 && wd <= 0.2) << wd;
    EXPECT_TRUE(layers >= 1 && layers <= 3) << layers;
    EXPECT_TRUE(p[3].second == "cosine" || p[3].second == "constant");
    lrs.insert(p[0].second);
  }
  EXPECT_GT(lrs.size(), 40u) << "different trials, different samples";
  SweepSpec other = *s;
  other.seed = 8;
  EXPECT_NE(SampleTrial(other, 0), SampleTrial(*s, 0));
}

TEST(SweepSpec, GridWalksEveryPointOnce) {
  auto s = ParseSweepSpec(
      "base: t.yaml\nsampler: grid\nasha: {min_steps: 2, max_steps: 8}\n"
      "space: {train.schedule: {choice: [cosine, constant]}, model.n_layer: {int: [1, 3]}}\n",
      "/x/sweep.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(TrialCount(*s), 6);
  std::set<std::vector<std::pair<std::string, std::string>>> seen;
  for (int i = 0; i < 6; i++) seen.insert(SampleTrial(*s, i));
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(SampleTrial(*s, 0)[1].second, "1");
  EXPECT_EQ(SampleTrial(*s, 5)[0].second, "constant");
  EXPECT_EQ(SampleTrial(*s, 5)[1].second, "3");
}

// Found by an input written against the parser's assumptions and fed through the sweep_spec fuzzer
// (fuzz/README.md; docs/hardening.md): a grid over int [-2147483648, 2147483647] has 2^32 values, and
// GridSize's cast of hi - lo + 1 to int overflowed (undefined behaviour; in practice a size of 0 or less,
// then a division by it in SampleTrial). Now such a grid is refused, and so are bounds that are not finite.
TEST(SweepSpec, FuzzRegressionGridTooWideAndBoundsNotFinite) {
  const std::string head = "base: t.yaml\nasha: {min_steps: 1, max_steps: 2}\n";
  auto wide = ParseSweepSpec(
      head + "sampler: grid\nspace:\n  model.n_layer: {int: [-2147483648, 2147483647]}\n", "/x/sweep.yaml");
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("space.model.n_layer: a grid over 4294967296 values"),
            std::string::npos)
      << wide.status().message();
  // The same range sampled at random is fine, and every sample is inside it.
  auto random = ParseSweepSpec(
      head + "trials: 3\nspace:\n  model.n_layer: {int: [-2147483648, 2147483647]}\n", "/x/sweep.yaml");
  ASSERT_TRUE(random.ok()) << random.status().ToString();
  for (int i = 0; i < 3; i++) (void)std::stoll(SampleTrial(*random, i)[0].second);
  // The widest grid allowed still walks to its last point.
  auto edge =
      ParseSweepSpec(head + "sampler: grid\nspace:\n  model.n_layer: {int: [1, 1048576]}\n", "/x/sweep.yaml");
  ASSERT_TRUE(edge.ok()) << edge.status().ToString();
  EXPECT_EQ(TrialCount(*edge), 1 << 20);
  EXPECT_EQ(SampleTrial(*edge, (1 << 20) - 1)[0].second, "1048576");
  auto inf = ParseSweepSpec(head + "trials: 2\nspace:\n  train.lr: {uniform: [0, .inf]}\n", "/x/sweep.yaml");
  ASSERT_FALSE(inf.ok());
  EXPECT_NE(inf.status().message().find("uniform needs finite [lo, hi]"), std::string::npos)
      << inf.status().message();
}

}  // namespace
}  // namespace tern::sweep
