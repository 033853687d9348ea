// PIPELINE.yaml parsing: every section read, defaults, and errors that name the key and what to do; the
// promotion rule by hand.
#include "pipeline/pipeline_spec.h"

#include <gtest/gtest.h>

#include "pipeline/pipeline.h"

namespace tern::pipeline {
namespace {

TEST(PipelineSpec, ReadsEverySection) {
  auto s = ParsePipelineSpec(R"(
name: demo
train: {config: configs/demo.yaml, set: [train.steps=20, eval.batches=2], run_args: [--price-per-hour, "0.1"]}
evaluate: {data: data/x, split: val, seq_len: 64, windows: 10, prompts: p.txt, choices: c.jsonl}
compare: {alias: prod, metric: prompt_logprob, margin: 0.02}
register: {registry: /tmp/reg, key_file: k.txt, note: nightly}
promote: false
)",
                             "p.yaml");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->name, "demo");
  EXPECT_EQ(s->config, "configs/demo.yaml");
  EXPECT_EQ(s->set, (std::vector<std::string>{"train.steps=20", "eval.batches=2"}));
  EXPECT_EQ(s->run_args, (std::vector<std::string>{"--price-per-hour", "0.1"}));
  EXPECT_EQ(s->data, "data/x");
  EXPECT_EQ(s->seq_len, 64);
  EXPECT_EQ(s->windows, 10);
  EXPECT_EQ(s->prompts, "p.txt");
  EXPECT_EQ(s->choices, "c.jsonl");
  EXPECT_EQ(s->alias, "prod");
  EXPECT_EQ(s->metric, Metric::kPromptLogprob);
  EXPECT_DOUBLE_EQ(s->margin, 0.02);
  EXPECT_EQ(s->registry, "/tmp/reg");
  EXPECT_EQ(s->note, "nightly");
  EXPECT_FALSE(s->promote);

  auto d = ParsePipelineSpec("name: m\ntrain: {model: runs/x}\n", "p.yaml");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->alias, "production");
  EXPECT_EQ(d->metric, Metric::kLoss);
  EXPECT_EQ(d->margin, 0);
  EXPECT_EQ(d->split, "val");
  EXPECT_TRUE(d->promote);
}

TEST(PipelineSpec, ErrorsNameTheKey) {
  struct Case {
    const char* yaml;
    const char* says;
  };
  for (const Case& c : {
           Case{"name: m\ntrain: {model: r}\ncompare: {alais: x}\n", "unknown key `compare.alais` (line 3)"},
           Case{"name: m\ntrain: {model: r}\nevals: {}\n", "unknown key `evals`"},
           Case{"train: {model: r}\n", "`name`"},
           Case{"name: m\n", "one of `train.config`"},
           Case{"name: m\ntrain: {model: r, config: c}\n", "one of `train.config`"},
           Case{"name: m\ntrain: {model: r}\ncompare: {metric: bleu}\n",
                "use loss, prompt_logprob, choice_acc or choice_acc_norm"},
           Case{"name: m\ntrain: {model: r}\ncompare: {metric: prompt_logprob}\n", "needs evaluate.prompts"},
           Case{"name: m\ntrain: {model: r}\ncompare: {metric: choice_acc_norm}\n",
                "choice_acc_norm needs evaluate.choices"},
           Case{"name: m\ntrain: {model: r}\ncompare: {margin: 1.5}\n", "[0, 1)"},
           Case{"name: m\ntrain: {model: r}\nevaluate: {windows: many}\n", "`evaluate.windows` (line 3)"},
           Case{"name: [m\n", "not valid YAML"},
       }) {
    auto s = ParsePipelineSpec(c.yaml, "p.yaml");
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status().ToString();
    EXPECT_EQ(s.status().message().rfind("p.yaml", 0), 0u) << s.status().ToString();
  }
}

TEST(PipelineSpec, BetterMeansByTheMargin) {
  Judgement base, cand;
  base.loss = 4.0;
  cand.loss = 3.97;  // 0.75% lower
  EXPECT_TRUE(IsBetter(Metric::kLoss, 0, cand, base));
  EXPECT_TRUE(IsBetter(Metric::kLoss, 0.005, cand, base));
  EXPECT_FALSE(IsBetter(Metric::kLoss, 0.01, cand, base));
  EXPECT_FALSE(IsBetter(Metric::kLoss, 0, base, base)) << "a tie is not better";
  base.prompt_logprob = -100;
  cand.prompt_logprob = -98;  // 2% higher
  EXPECT_TRUE(IsBetter(Metric::kPromptLogprob, 0.01, cand, base));
  EXPECT_FALSE(IsBetter(Metric::kPromptLogprob, 0.03, cand, base));
  cand.prompt_logprob.reset();
  EXPECT_FALSE(IsBetter(Metric::kPromptLogprob, 0, cand, base)) << "no prompts scored: never better";
  base.choice_acc = 0.50;
  cand.choice_acc = 0.52;
  base.choice_acc_norm = 0.60;
  cand.choice_acc_norm = 0.58;
  EXPECT_TRUE(IsBetter(Metric::kChoiceAcc, 0.02, cand, base)) << "4% more right";
  EXPECT_FALSE(IsBetter(Metric::kChoiceAcc, 0.05, cand, base));
  EXPECT_FALSE(IsBetter(Metric::kChoiceAccNorm, 0, cand, base)) << "each metric reads its own number";
  EXPECT_EQ(std::string(MetricName(Metric::kChoiceAccNorm)), "choice_acc_norm");
}

}  // namespace
}  // namespace tern::pipeline
