// The live metrics: the exposition text of known rows (golden), and the server: /metrics over real HTTP,
// a port in use refused with a clear error.
#include "metrics/live_metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "metrics/metrics_server.h"

namespace tern {
namespace {

void FeedKnownRun(LiveRunState* live) {
  StartRecord start;
  start.model = "L2 H2 C32 V300 T32";
  start.params = 26432;
  start.device = "cpu";
  start.precision = "fp32";
  start.dist = "single";
  start.world = 1;
  start.peak_gflops = 100;
  start.price_per_hour = 2.5;
  live->Observe(ToJson(start));
  StepRecord step;
  step.step = 1;
  step.loss = 5.75;
  step.step_ms = 250;
  step.data_wait_ms = 10;
  step.comm_ms = 0;
  live->Observe(ToJson(step));
  step.step = 2;
  step.loss = 5.5;
  step.lr = 0.0006;
  step.grad_norm = 1.25;
  step.tokens = 512;
  step.tokens_per_s = 2048;
  step.mfu = 0.0125;
  step.step_ms = 125;
  step.data_wait_ms = 2.5;
  step.comm_ms = 0.5;
  step.precision = "fp32";
  step.elapsed_s = 0.375;
  step.cost_usd = 0.0002;
  step.usd_per_mtok = 0.34;
  step.gpu = GpuRecord{87, 12.5, 300, 0.002};
  live->Observe(ToJson(step));
  live->Observe(
      ToJson(EvalRecord{2, 5.625, 40, 0.75, 0.5, {{"data/kjv", 4.25}, {"data/\"odd\" name", 3.5}}}));
  live->Observe(
      ToJson(EventRecord{"checkpoint", 2, {{"stall_ms", 30.0}, {"wait_ms", 20.0}, {"tier", "fast"}}}));
  live->Observe(nlohmann::json{{"v", 99}, {"step", 3}, {"loss", 1.0}});  // a row it cannot read: ignored
}

constexpr const char* kGolden =
    R"(# HELP tern_run_info The run's model, precision, device and communicator (value 1).
# TYPE tern_run_info gauge
tern_run_info{model="L2 H2 C32 V300 T32",precision="fp32",device="cpu",dist="single"} 1
# HELP tern_world_size Data-parallel ranks of the run.
# TYPE tern_world_size gauge
tern_world_size 1
# HELP tern_params Model parameters.
# TYPE tern_params gauge
tern_params 26432
# HELP tern_peak_flops Peak FLOP/s the MFU is measured against (matmul probe or run.peak_gflops).
# TYPE tern_peak_flops gauge
tern_peak_flops 100000000000
# HELP tern_price_usd_per_hour Price of the machine in USD per hour.
# TYPE tern_price_usd_per_hour gauge
tern_price_usd_per_hour 2.5
# HELP tern_step Last optimizer step completed (1-based).
# TYPE tern_step gauge
tern_step 2
# HELP tern_tokens_total Tokens trained on, cumulative over the run (resumes included).
# TYPE tern_tokens_total counter
tern_tokens_total 512
# HELP tern_train_loss Training loss of the last step, in nats.
# TYPE tern_train_loss gauge
tern_train_loss 5.5
# HELP tern_learning_rate Learning rate of the last step.
# TYPE tern_learning_rate gauge
tern_learning_rate 0.0006
# HELP tern_grad_norm Global gradient L2 norm of the last step before clipping (NaN: skipped).
# TYPE tern_grad_norm gauge
tern_grad_norm 1.25
# HELP tern_tokens_per_second Throughput of the last step (its tokens over its wall time).
# TYPE tern_tokens_per_second gauge
tern_tokens_per_second 2048
# HELP tern_mfu_ratio Model FLOPs utilisation of the last step (0 to 1).
# TYPE tern_mfu_ratio gauge
tern_mfu_ratio 0.0125
# HELP tern_step_duration_seconds Wall time of the last step.
# TYPE tern_step_duration_seconds gauge
tern_step_duration_seconds 0.125
# HELP tern_step_data_wait_seconds Time the last step waited for the data loader.
# TYPE tern_step_data_wait_seconds gauge
tern_step_data_wait_seconds 0.0025
# HELP tern_step_communication_seconds Exposed communication time of the last step.
# TYPE tern_step_communication_seconds gauge
tern_step_communication_seconds 0.0005
# HELP tern_elapsed_seconds Seconds since the trainer's clock started (evaluation included).
# TYPE tern_elapsed_seconds gauge
tern_elapsed_seconds 0.375
# HELP tern_step_seconds_total Wall time of the steps this process ran.
# TYPE tern_step_seconds_total counter
tern_step_seconds_total 0.375
# HELP tern_data_wait_seconds_total Time this process's steps waited for the data loader.
# TYPE tern_data_wait_seconds_total counter
tern_data_wait_seconds_total 0.0125
# HELP tern_communication_seconds_total Exposed communication time of this process's steps.
# TYPE tern_communication_seconds_total counter
tern_communication_seconds_total 0.0005
# HELP tern_cost_usd_total USD spent so far (the row's cost_usd; under tern run, the job's).
# TYPE tern_cost_usd_total counter
tern_cost_usd_total 0.0002
# HELP tern_cost_usd_per_million_tokens USD per million tokens at the last step's speed.
# TYPE tern_cost_usd_per_million_tokens gauge
tern_cost_usd_per_million_tokens 0.34
# HELP tern_gpu_utilization_ratio GPU utilisation at the end of the last step (NVML, 0 to 1).
# TYPE tern_gpu_utilization_ratio gauge
tern_gpu_utilization_ratio 0.87
# HELP tern_gpu_memory_used_bytes GPU memory in use, all processes (NVML).
# TYPE tern_gpu_memory_used_bytes gauge
tern_gpu_memory_used_bytes 12500000000
# HELP tern_gpu_power_watts GPU board power at the end of the last step (NVML).
# TYPE tern_gpu_power_watts gauge
tern_gpu_power_watts 300
# HELP tern_energy_per_token_joules GPU energy of the last step per token.
# TYPE tern_energy_per_token_joules gauge
tern_energy_per_token_joules 0.002
# HELP tern_val_loss Validation loss of the last evaluation, in nats.
# TYPE tern_val_loss gauge
tern_val_loss 5.625
# HELP tern_val_step Step of the last evaluation.
# TYPE tern_val_step gauge
tern_val_step 2
# HELP tern_val_choice_acc Accuracy on the eval.choices multiple-choice set at the last evaluation.
# TYPE tern_val_choice_acc gauge
tern_val_choice_acc 0.75
# HELP tern_val_loss_dataset Validation loss of each data.mix dataset at the last evaluation, in nats (data.dir's is tern_val_loss).
# TYPE tern_val_loss_dataset gauge
tern_val_loss_dataset{dataset="data/\"odd\" name"} 3.5
tern_val_loss_dataset{dataset="data/kjv"} 4.25
# HELP tern_checkpoint_stall_seconds_total Time training stood still for checkpoint saves (stall + wait, and an emergency save).
# TYPE tern_checkpoint_stall_seconds_total counter
tern_checkpoint_stall_seconds_total 0.05
# HELP tern_checkpoints_total Checkpoints saved by this process.
# TYPE tern_checkpoints_total counter
tern_checkpoints_total 1
)";

TEST(LiveMetrics, ExpositionOfKnownRowsIsTheGoldenText) {
  LiveRunState live;
  FeedKnownRun(&live);
  EXPECT_EQ(live.Text(), kGolden);
}

TEST(LiveMetrics, BeforeTheFirstStepOnlyTheTotalsAreServed) {
  EXPECT_EQ(
      PrometheusText({}),
      "# HELP tern_checkpoint_stall_seconds_total Time training stood still for checkpoint saves (stall + "
      "wait, and an emergency save).\n# TYPE tern_checkpoint_stall_seconds_total counter\n"
      "tern_checkpoint_stall_seconds_total 0\n# HELP tern_checkpoints_total Checkpoints saved by this "
      "process.\n# TYPE tern_checkpoints_total counter\ntern_checkpoints_total 0\n");
  LiveSnapshot s;
  s.step = StepRecord{};
  s.step->grad_norm = std::nan("");
  s.start = StartRecord{};
  s.start->model = "a \"quoted\"\\name";
  const std::string text = PrometheusText(s);
  EXPECT_NE(text.find("tern_grad_norm NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("model=\"a \\\"quoted\\\"\\\\name\""), std::string::npos) << text;
}

TEST(LiveMetrics, ServesOverHttpAndRefusesAPortInUse) {
  LiveRunState live;
  FeedKnownRun(&live);
  auto server = MetricsServer::Start("127.0.0.1", 0, [&live] { return live.Text(); });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, kGolden);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");

  auto second = MetricsServer::Start("127.0.0.1", port, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("--metrics-port"), std::string::npos);
  EXPECT_FALSE(MetricsServer::Start("127.0.0.1", 70000, [] { return std::string(); }).ok());
  server->reset();  // stops and joins
  EXPECT_FALSE(client.Get("/metrics"));
}

}  // namespace
}  // namespace tern
