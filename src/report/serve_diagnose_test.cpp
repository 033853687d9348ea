// The serving diagnosis (`tern diagnose --serve`): the Prometheus text reader, and every serving rule firing
// on a scrape with its condition and staying silent on a healthy server's.
#include "report/serve_diagnose.h"

#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "plan/defaults.h"

namespace tern::report {
namespace {

TEST(ParsePromText, ReadsSamplesLabelsAndSpecialValues) {
  auto s = ParsePromText(
      "# HELP x A counter.\n# TYPE x counter\nx 3\n\n"
      "y{route=\"/v1/completions\",code=\"200\"} 7 1700000000000\n"
      "h_bucket{le=\"+Inf\"} +Inf\r\n"
      "  z{a=\"q\\\"uote\\\\n\\n\",} -2.5e-3\n"
      "n NaN\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 5u);
  EXPECT_EQ((*s)[0].name, "x");
  EXPECT_EQ((*s)[0].value, 3);
  EXPECT_EQ((*s)[1].labels.at("route"), "/v1/completions");
  EXPECT_EQ((*s)[1].value, 7);  // the timestamp is not the value
  EXPECT_TRUE(std::isinf((*s)[2].value));
  EXPECT_EQ((*s)[3].labels.at("a"), "q\"uote\\n\n");
  EXPECT_DOUBLE_EQ((*s)[3].value, -2.5e-3);
  EXPECT_TRUE(std::isnan((*s)[4].value));
  PromMetrics m(std::move(*s));
  EXPECT_EQ(m.Sum("y", {{"code", "200"}}), 7);
  EXPECT_EQ(m.Sum("y", {{"code", "500"}}), 0);
  EXPECT_FALSE(m.Has("w"));
}

TEST(ParsePromText, NamesTheLineOfAMalformedSample) {
  for (const char* bad : {"ok 1\n{x=\"1\"} 2\n", "ok 1\nx{a=1} 2\n", "ok 1\nx{a=\"1\" 2\n", "ok 1\nx\n",
                          "ok 1\nx one\n", "ok 1\nx{a=\"\\q\"} 1\n"}) {
    auto s = ParsePromText(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("line 2"), std::string::npos) << s.status().message();
  }
}

// A scrape of a server that ran `hours` at `busy` with `requests` finished, as tern serve writes it.
struct Scrape {
  double hours = 10, busy = 0.9, requests = 36000, cancelled = 100, refused = 0, key_limited = 0,
         preemptions = 0, drafts = 0, accepted = 0, price = 0, tpot_s = 0.02, lora_loads = 0;
  bool model_info = true;
  std::string weights = "bf16";
  std::string Text() const {
    const double total = hours * 3600;
    std::string t = fmt::format(
        "tern_busy_seconds_total {}\ntern_idle_seconds_total {}\n"
        "tern_requests_finished_total{{reason=\"stop\"}} "
        "{}\ntern_requests_finished_total{{reason=\"length\"}} 0\n"
        "tern_requests_finished_total{{reason=\"cancelled\"}} {}\n"
        "tern_prompt_tokens_total {}\ntern_generation_tokens_total {}\n"
        "tern_time_to_first_token_seconds_sum {}\ntern_time_to_first_token_seconds_count {}\n"
        "tern_time_per_output_token_seconds_sum {}\ntern_time_per_output_token_seconds_count {}\n"
        "tern_batch_size_sum 40000\ntern_batch_size_count 10000\n"
        "tern_http_requests_total{{route=\"/v1/completions\",code=\"200\"}} {}\n"
        "tern_http_requests_total{{route=\"/v1/chat/completions\",code=\"429\"}} {}\n"
        "tern_usage_rate_limited_total{{project=\"a\",key_id=\"k\",limit=\"tokens\"}} {}\n"
        "tern_preemptions_total {}\ntern_spec_decode_draft_tokens_total {}\n"
        "tern_spec_decode_accepted_tokens_total {}\n",
        total * busy, total * (1 - busy), requests, cancelled, requests * 200, requests * 100, requests * 0.1,
        requests, requests * 99 * tpot_s, requests * 99, requests + cancelled, refused, key_limited,
        preemptions, drafts, accepted);
    if (price > 0) t += fmt::format("tern_price_per_hour_usd {}\n", price);
    if (lora_loads > 0)
      t += fmt::format("tern_lora_loads_total {}\ntern_lora_load_seconds_total {}\ntern_lora_adapters 8\n",
                       lora_loads, lora_loads * 0.004);
    if (model_info)
      t += "tern_model_info{model=\"gpt2\",n_layer=\"12\",n_head=\"12\",n_embd=\"768\",vocab_size=\"50257\","
           "block_size=\"1024\",weights=\"" +
           weights + "\",kv_dtype=\"bf16\",device=\"cuda\"} 1\n";
    return t;
  }
};

std::vector<std::string> Rules(const Scrape& sc, const plan::Catalog* cat = nullptr,
                               std::vector<Finding>* out = nullptr) {
  auto samples = ParsePromText(sc.Text());
  EXPECT_TRUE(samples.ok()) << samples.status().ToString();
  const ServeSummary s = SummarizeServe(PromMetrics(std::move(*samples)));
  auto f = DiagnoseServe(s, ServeDiagnoseOptions{}, cat);
  std::vector<std::string> names;
  for (const auto& x : f) names.push_back(x.rule);
  if (out) *out = f;
  return names;
}

// `# TYPE` gives a family's samples their type (a histogram's _bucket, _sum, _count too); cumulative samples
// are a counter's and a histogram's, or by name (_total, _bucket, _sum, _count) when the text gives no type.
TEST(ParsePromText, TypesAndCumulativeSamples) {
  auto s = ParsePromText(
      "# HELP c A counter.\n# TYPE c counter\nc 1\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 3\n"
      "h_count 2\n#  TYPE   g gauge\ng_total 5\nu_total 1\nu 2\n# TYPE s summary\ns{quantile=\"0.5\"} 1\n"
      "s_count 4\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> types, cumulative;
  for (const PromSample& x : *s) {
    types.push_back(x.type);
    if (IsCumulative(x)) cumulative.push_back(x.name);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"counter", "histogram", "histogram", "histogram", "", "", "",
                                             "summary", "summary"}));
  // g_total is not g's family: untyped, cumulative by its name; "g" itself has no sample.
  EXPECT_EQ(cumulative,
            (std::vector<std::string>{"c", "h_bucket", "h_sum", "h_count", "g_total", "u_total", "s_count"}));
}

// Between two scrapes: counters and histograms subtract, gauges keep the newer value, a sample new since the
// first is kept whole, and a counter that fell (a restart) is an error naming it.
TEST(PromDelta, SubtractsCountersKeepsGauges) {
  auto parse = [](const std::string& t) { return PromMetrics(ParsePromText(t).value()); };
  const std::string types = "# TYPE r counter\n# TYPE l histogram\n# TYPE q gauge\n";
  const PromMetrics before =
      parse(types + "r{code=\"200\"} 10\nr{code=\"429\"} 1\nl_sum 2.5\nl_count 5\nq 7\n");
  const PromMetrics now =
      parse(types + "r{code=\"200\"} 25\nr{code=\"429\"} 1\nr{code=\"500\"} 2\nl_sum 4\nl_count 8\nq 3\n");
  auto d = PromDelta(now, before);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->Sum("r", {{"code", "200"}}), 15);
  EXPECT_EQ(d->Sum("r", {{"code", "429"}}), 0);
  EXPECT_EQ(d->Sum("r", {{"code", "500"}}), 2);
  EXPECT_DOUBLE_EQ(d->Sum("l_sum"), 1.5);
  EXPECT_EQ(d->Sum("l_count"), 3);
  EXPECT_EQ(d->Sum("q"), 3);
  auto restarted = PromDelta(before, now);
  ASSERT_FALSE(restarted.ok());
  EXPECT_NE(restarted.status().message().find("restarted"), std::string::npos);
  EXPECT_NE(restarted.status().message().find("r fell from 25 to 10"), std::string::npos)
      << restarted.status().message();
}

// A restart between the scrapes: the window is the newer scrape whole (the life since the restart), and says
// what showed it: the start time when both scrapes have it, else the first counter that fell. Without a
// restart it is the delta.
TEST(PromSince, ALifeSinceARestart) {
  Scrape day, restarted;
  restarted.hours = 2;  // the new life: 2 hours, fewer of everything
  restarted.requests = 7200;
  const auto with_start = [](const Scrape& s, double start) {
    return PromMetrics(ParsePromText(s.Text() + fmt::format("# TYPE process_start_time_seconds gauge\n"
                                                            "process_start_time_seconds {}\n",
                                                            start))
                           .value());
  };
  const PromWindow w = PromSince(with_start(restarted, 2000), with_start(day, 1000));
  EXPECT_NE(w.restart.find("process_start_time_seconds changed from 1000 to 2000"), std::string::npos)
      << w.restart;
  EXPECT_NEAR(SummarizeServe(w.metrics).hours, 2, 1e-9);
  EXPECT_DOUBLE_EQ(SummarizeServe(w.metrics).requests, 7200);
  // A restarted server whose new life already outgrew every counter but one: the start time still tells.
  Scrape longer = day;
  longer.hours = 12;
  longer.cancelled = 50;
  const PromWindow l = PromSince(with_start(longer, 2000), with_start(day, 1000));
  EXPECT_FALSE(l.restart.empty());
  EXPECT_NEAR(SummarizeServe(l.metrics).hours, 12, 1e-9);
  // Without start times (an older server) a fallen counter shows it.
  const PromMetrics a(ParsePromText(day.Text()).value()), b(ParsePromText(restarted.Text()).value());
  const PromWindow f = PromSince(b, a);
  EXPECT_NE(f.restart.find("fell from"), std::string::npos) << f.restart;
  EXPECT_NEAR(SummarizeServe(f.metrics).hours, 2, 1e-9);
  // The same life: the delta.
  Scrape grown = day;
  grown.hours = 12;
  grown.requests = 40000;
  const PromWindow same = PromSince(with_start(grown, 1000), with_start(day, 1000));
  ASSERT_TRUE(same.restart.empty()) << same.restart;
  EXPECT_NEAR(SummarizeServe(same.metrics).hours, 2, 1e-9);
  EXPECT_DOUBLE_EQ(SummarizeServe(same.metrics).requests, 4000);
}

// A server busy 90% of ten hours, then idle for one: over its life no rule fires; over the last hour it is an
// idle server, at the whole price, and $ per 1M tokens is the window's.
TEST(ServeDiagnose, AWindowSeesWhatTheWholeLifeHides) {
  Scrape day;
  day.price = 4;
  Scrape later = day;
  later.hours = 11;
  later.busy = 0.9 * 10 / 11;
  auto whole = ParsePromText(later.Text()), first = ParsePromText(day.Text());
  ASSERT_TRUE(whole.ok() && first.ok());
  const PromMetrics now(std::move(*whole)), before(std::move(*first));
  EXPECT_TRUE(DiagnoseServe(SummarizeServe(now), ServeDiagnoseOptions{}, nullptr).empty());
  EXPECT_NEAR(SummarizeServe(now).usd_per_mtok, 4.0 * 11 / (36000 * 100) * 1e6, 1e-9);
  auto d = PromDelta(now, before);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const ServeSummary w = SummarizeServe(*d);
  EXPECT_NEAR(w.hours, 1, 1e-9);
  EXPECT_NEAR(w.busy_fraction, 0, 1e-9);
  EXPECT_EQ(w.requests, 0);
  EXPECT_EQ(w.price_per_hour, 4);  // a gauge: the newer value, not 0
  const auto f = DiagnoseServe(w, ServeDiagnoseOptions{}, nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "idle_server");
  EXPECT_NEAR(f[0].usd_per_hour, 4, 1e-9);
}

TEST(ServeDiagnose, SummarizesTheCounters) {
  auto samples = ParsePromText(Scrape{}.Text());
  ASSERT_TRUE(samples.ok());
  const ServeSummary s = SummarizeServe(PromMetrics(std::move(*samples)));
  EXPECT_DOUBLE_EQ(s.hours, 10);
  EXPECT_DOUBLE_EQ(s.busy_fraction, 0.9);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1);
  EXPECT_DOUBLE_EQ(s.prompt_tokens, 200);
  EXPECT_DOUBLE_EQ(s.completion_tokens, 100);
  EXPECT_NEAR(s.tpot_s, 0.02, 1e-12);
  EXPECT_NEAR(s.ttft_s, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.batch, 4);
  ASSERT_TRUE(s.model.has_value());
  EXPECT_EQ(s.model->n_embd, 768);
  EXPECT_EQ(s.weights, "bf16");
  EXPECT_EQ(s.device, "cuda");
}

TEST(ServeDiagnose, AHealthyServerHasNoFindings) {
  EXPECT_TRUE(Rules(Scrape{}).empty());
}

TEST(ServeDiagnose, EachRuleFiresOnItsCondition) {
  Scrape idle;
  idle.busy = 0.2;
  idle.price = 4;
  std::vector<Finding> f;
  EXPECT_EQ(Rules(idle, nullptr, &f), std::vector<std::string>{"idle_server"});
  EXPECT_NEAR(f[0].usd_per_hour, 0.8 * 4, 1e-9);

  Scrape refused;
  refused.refused = 900;
  refused.key_limited = 100;  // a key's own limits are not the server's capacity
  EXPECT_EQ(Rules(refused, nullptr, &f), std::vector<std::string>{"refused_capacity"});
  EXPECT_EQ(f[0].numbers["refused"], 800);
  refused.key_limited = 900;
  EXPECT_TRUE(Rules(refused).empty());

  Scrape cancelled;
  cancelled.cancelled = 4000;
  EXPECT_EQ(Rules(cancelled), std::vector<std::string>{"cancelled_requests"});

  Scrape preempted;
  preempted.preemptions = 3600;
  EXPECT_EQ(Rules(preempted), std::vector<std::string>{"preemptions"});

  Scrape drafts;
  drafts.drafts = 10000;
  drafts.accepted = 2000;
  EXPECT_EQ(Rules(drafts), std::vector<std::string>{"speculative_rejects"});
  drafts.accepted = 6000;
  EXPECT_TRUE(Rules(drafts).empty());

  // --max-loaded-loras below the adapters in use: read back for 20% of 36100 requests (10% is the line).
  Scrape reloads;
  reloads.lora_loads = 7220;
  EXPECT_EQ(Rules(reloads, nullptr, &f), std::vector<std::string>{"lora_reloads"});
  EXPECT_NE(f[0].title.find("20%"), std::string::npos) << f[0].title;
  EXPECT_NE(f[0].evidence.find(" 4 ms each"), std::string::npos) << f[0].evidence;
  EXPECT_NE(f[0].fix.find("--max-loaded-loras"), std::string::npos);
  EXPECT_EQ(f[0].numbers["lora_in_memory"], 8);
  reloads.lora_loads = 3000;  // 8%
  EXPECT_TRUE(Rules(reloads).empty());
}

// The planner serves 1 request/s of GPT-2 124M far below $40/h within the 20 ms per token measured; the fix
// is the plan command for that load. Without a price, or without the model's shape, the rule says nothing.
TEST(ServeDiagnose, CheaperServingPlansTheMeasuredLoad) {
  auto dir = plan::FindCatalogDir();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto cat = plan::LoadCatalog(plan::ShippedCatalogFiles(*dir), plan::PlanDefaults{});
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  Scrape dear;
  dear.price = 40;
  std::vector<Finding> f;
  EXPECT_EQ(Rules(dear, &*cat, &f), std::vector<std::string>{"cheaper_serving"});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_GT(f[0].usd_per_hour, 0.1 * 40);
  EXPECT_LT(f[0].numbers["hourly_usd"].get<double>(), 36.0);
  EXPECT_LE(f[0].numbers["tpot_s"].get<double>(), 0.02 + 1e-9);
  EXPECT_NE(f[0].fix.find("tern plan --serve --model gpt2-124m --weights bf16 --requests-per-s 1 "
                          "--prompt-tokens 200 --completion-tokens 100 --max-tpot-ms 20"),
            std::string::npos)
      << f[0].fix;
  // A speculating server: the plan is of the same speculation, its measured draft tokens per sequence step
  // (720,000 over 3,600,000 - 540,000 steps) and the share kept (75%).
  Scrape speculating = dear;
  speculating.drafts = 720000;
  speculating.accepted = 540000;
  const ServeSummary ss = SummarizeServe(PromMetrics(ParsePromText(speculating.Text()).value()));
  EXPECT_NEAR(ss.spec_drafts_per_step, 720000.0 / 3060000, 1e-12);
  EXPECT_EQ(Rules(speculating, &*cat, &f), std::vector<std::string>{"cheaper_serving"});
  EXPECT_NE(f[0].fix.find("--max-tpot-ms 20 --speculative-tokens 0.24 --acceptance 0.75"), std::string::npos)
      << f[0].fix;
  Scrape no_price = dear;
  // A server of int4 weights (tern serve's CPU path): GPUs are planned with int8, which they run.
  Scrape int4 = dear;
  int4.weights = "int4";
  EXPECT_EQ(Rules(int4, &*cat, &f), std::vector<std::string>{"cheaper_serving"});
  EXPECT_NE(f[0].fix.find("--weights int8 --requests-per-s 1 "), std::string::npos) << f[0].fix;
  no_price.price = 0;
  EXPECT_TRUE(Rules(no_price, &*cat).empty());
  Scrape no_shape = dear;
  no_shape.model_info = false;
  EXPECT_TRUE(Rules(no_shape, &*cat).empty());
}

}  // namespace
}  // namespace tern::report
