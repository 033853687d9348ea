#include "dist/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "metrics/run_record.h"

namespace tern::dist {
namespace {

using Clock = std::chrono::steady_clock;

// "1 KiB", "256 MiB", "1000 B".
std::string SizeName(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 3 && std::fmod(v, 1024) == 0) v /= 1024, ++u;
  return fmt::format("{:g} {}", v, units[u]);
}

// The send and receive buffers of the largest size, on the host or on the device.
class Buffers {
 public:
  Buffers(Backend* device, size_t count, float fill) : device_(device) {
    if (device_) {
      send_ = static_cast<float*>(device_->Alloc(count * sizeof(float)));
      recv_ = static_cast<float*>(device_->Alloc(count * sizeof(float)));
      const std::vector<float> host(count, fill);
      device_->Upload(send_, host.data(), count * sizeof(float));
      device_->Synchronize();
    } else {
      host_send_.assign(count, fill);
      host_recv_.assign(count, 0.0f);
      send_ = host_send_.data();
      recv_ = host_recv_.data();
    }
  }
  ~Buffers() {
    if (device_) device_->Free(send_), device_->Free(recv_);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;

  const float* send() const { return send_; }
  float* recv() { return recv_; }
  // The received element i (a device read on the device).
  float Received(size_t i) {
    if (!device_) return host_recv_[i];
    float v = 0;
    device_->Download(&v, recv_ + i, sizeof(float));
    device_->Synchronize();
    return v;
  }

 private:
  Backend* device_;
  float* send_ = nullptr;
  float* recv_ = nullptr;
  std::vector<float> host_send_, host_recv_;
};

// Every element of the first `count` received must be `want` (the host checks all, the device both ends).
Status CheckSum(Buffers& b, size_t count, bool device, float want) {
  const size_t step = device ? std::max<size_t>(1, count - 1) : 1;
  for (size_t i = 0; i < count; i += step) {
    const float got = b.Received(i);
    if (got != want) {
      return Status::Internal(
          fmt::format("all-reduce of {} floats gave {} at element {}, expected {} (the sum of rank + 1 over "
                      "the ranks): the communicator is broken",
                      count, got, i, want));
    }
  }
  return Status::Ok();
}

}  // namespace

double BusBandwidthFactor(int world) {
  return world <= 1 ? 0.0 : 2.0 * (world - 1) / world;
}

std::vector<size_t> AllReduceBenchSizes(size_t min_bytes, size_t max_bytes) {
  std::vector<size_t> sizes;
  const size_t lo = std::max<size_t>(sizeof(float), (min_bytes + sizeof(float) - 1) / sizeof(float) * 4);
  const size_t hi = max_bytes / sizeof(float) * sizeof(float);
  for (size_t s = lo; s < hi; s *= 2) sizes.push_back(s);
  if (hi >= lo) sizes.push_back(hi);
  return sizes;
}

Result<AllReduceBenchResult> RunAllReduceBench(Communicator& comm, Backend* device,
                                               const AllReduceBenchOptions& o) {
  if (o.iters < 1 || o.warmup < 0)
    return Status::InvalidArgument(
        "--steps (iterations per size) must be at least 1 and --warmup at least 0");
  const std::vector<size_t> sizes = AllReduceBenchSizes(o.min_bytes, o.max_bytes);
  if (sizes.empty()) {
    return Status::InvalidArgument(fmt::format("no message size between {} and {} bytes: raise --dist-max-mb",
                                               o.min_bytes, o.max_bytes));
  }
  AllReduceBenchResult r;
  r.options = o;
  r.communicator = comm.name();
  r.world = comm.world();
  r.local_world = comm.local_world();
  r.device_memory = comm.device_memory();
  if (r.device_memory && !device)
    return Status::InvalidArgument("the " + r.communicator +
                                   " communicator moves device memory: pass its backend");
  // Nodes: one rank per node has local rank 0.
  TERN_ASSIGN_OR_RETURN(const int64_t nodes, comm.AllReduceInt(comm.local_rank() == 0 ? 1 : 0, IntOp::kSum));
  r.nodes = static_cast<int>(std::max<int64_t>(1, nodes));

  const size_t max_count = sizes.back() / sizeof(float);
  Buffers buf(r.device_memory ? device : nullptr, max_count, static_cast<float>(comm.rank() + 1));
  const float want = static_cast<float>(r.world) * (r.world + 1) / 2;
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    const auto one = [&] {
      return comm.AllReduceAsync(buf.send(), buf.recv(), count, ReduceOp::kSum).Wait();
    };
    for (int i = 0; i < o.warmup; ++i) TERN_RETURN_IF_ERROR(one());
    TERN_RETURN_IF_ERROR(comm.Barrier());
    const auto t0 = Clock::now();
    for (int i = 0; i < o.iters; ++i) TERN_RETURN_IF_ERROR(one());
    int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    TERN_RETURN_IF_ERROR(comm.AllReduceInt(&ns, 1, IntOp::kMax));  // the slowest rank sets the pace
    TERN_RETURN_IF_ERROR(CheckSum(buf, count, r.device_memory, want));
    AllReduceSample s;
    s.bytes = bytes;
    s.count = count;
    s.time_us = static_cast<double>(std::max<int64_t>(ns, 1)) / 1e3 / o.iters;
    s.algbw_gb_per_s = static_cast<double>(bytes) / (s.time_us * 1e3);  // bytes per ns = GB/s
    s.busbw_gb_per_s = s.algbw_gb_per_s * BusBandwidthFactor(r.world);
    r.sizes.push_back(s);
  }
  r.latency_us = r.sizes.front().time_us;
  r.link_gb_per_s = r.sizes.back().busbw_gb_per_s;
  return r;
}

nlohmann::json AllReduceBenchResult::ToJson() const {
  using nlohmann::json;
  json samples = json::array();
  for (const AllReduceSample& s : sizes) {
    samples.push_back({{"bytes", s.bytes},
                       {"count", s.count},
                       {"time_us", s.time_us},
                       {"algbw_gb_per_s", s.algbw_gb_per_s},
                       {"busbw_gb_per_s", s.busbw_gb_per_s}});
  }
  auto or_null = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  json j = {
      {"tool", "tern bench --dist"},
      {"collective", "all_reduce"},
      {"op", "sum"},
      {"dtype", "fp32"},
      {"communicator", communicator},
      {"world", world},
      {"nodes", nodes},
      {"local_world", local_world},
      {"device", device_memory ? "cuda" : "cpu"},
      {"backend", backend},
      {"gpu", or_null(gpu)},
      {"gpu_name", or_null(gpu_name)},
      {"machine",
       {{"cpu", cpu.model}, {"isa", cpu.isa}, {"threads", threads}, {"logical_cpus", cpu.logical_cpus}}},
      {"warmup", options.warmup},
      {"iters", options.iters},
      {"sizes", samples},
      {"latency_us", latency_us},
      {"link_gb_per_s", link_gb_per_s},
      {"bus_factor", BusBandwidthFactor(world)}};
  StampRecordVersion(&j);  // the format version (metrics/run_record.h)
  return j;
}

std::string AllReduceBenchResult::ToText() const {
  std::string out = fmt::format(
      "all-reduce {}, {} rank{} on {} node{} ({} memory), sum of fp32, out of place; the slowest rank's mean "
      "of {} after {} warm-up\n",
      communicator, world, world == 1 ? "" : "s", nodes, nodes == 1 ? "" : "s",
      device_memory ? "device" : "host", options.iters, options.warmup);
  out += fmt::format(
      "cpu        {}, {} threads of {} logical CPUs{}\n", cpu.model, threads, cpu.logical_cpus,
      gpu_name.empty() ? "" : fmt::format("; gpu {} (catalog: {})", gpu_name, gpu.empty() ? "?" : gpu));
  out += fmt::format("{:>10} {:>10} {:>12} {:>12} {:>12}\n", "size", "count", "time us", "algbw GB/s",
                     "busbw GB/s");
  for (const AllReduceSample& s : sizes) {
    out += fmt::format("{:>10} {:>10} {:>12.1f} {:>12.3f} {:>12.3f}\n", SizeName(s.bytes), s.count, s.time_us,
                       s.algbw_gb_per_s, s.busbw_gb_per_s);
  }
  if (world == 1) {
    out += fmt::format(
        "world 1: one process, nothing crossed a link (each call is a local copy); latency {:.1f} us. Launch "
        "with mpirun -np N or srun -n N to measure the ranks' link\n",
        latency_us);
  } else {
    out += fmt::format("link       {:.2f} GB/s bus bandwidth at {}, latency {:.1f} us at {} ({} ranks, {})\n",
                       link_gb_per_s, SizeName(sizes.back().bytes), latency_us, SizeName(sizes.front().bytes),
                       world, communicator);
  }
  return out;
}

}  // namespace tern::dist
