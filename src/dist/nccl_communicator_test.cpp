// The NCCL communicator on one GPU: a world of one, bootstrapped through the id file (no MPI), on the CUDA
// backend's buffers and stream. Skipped with "skipped: no GPU" without one. With several GPUs the same
// collectives at world > 1 run through dist_test under mpirun once the trainer uses NCCL (README.md).
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/registry.h"
#include "dist/nccl_communicator.h"
#include "testing/files.h"

namespace tern::dist {
namespace {

TEST(Nccl, WithoutMpiOrAnIdFileSaysHowToShareTheId) {  // needs no GPU: fails before touching CUDA
  NcclOptions o;
  Result<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(std::move(o));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dist.nccl_id_file"), std::string::npos) << c.status().message();
}

class NcclOneGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) GTEST_SKIP() << "skipped: no GPU";
    Result<std::unique_ptr<Backend>> b = MakeBackend("cuda");
    ASSERT_TRUE(b.ok()) << b.status().message();
    backend_ = std::move(b).value();
    NcclOptions o;
    o.timeout = std::chrono::milliseconds(60000);
    o.compute_stream = static_cast<CudaBackend*>(backend_.get())->stream();
    o.device = 0;
    o.id_file = dir_ / "nccl.id";
    o.id_tag = "nccl-test";
    Result<std::unique_ptr<NcclCommunicator>> c = NcclCommunicator::Create(std::move(o));
    ASSERT_TRUE(c.ok()) << c.status().message();
    comm_ = std::move(c).value();
  }

  float* Device(const std::vector<float>& host) {
    auto* p = static_cast<float*>(backend_->Alloc(std::max<size_t>(host.size(), 1) * sizeof(float)));
    backend_->Upload(p, host.data(), host.size() * sizeof(float));
    buffers_.push_back(p);
    return p;
  }
  std::vector<float> Host(const float* p, size_t n) {
    std::vector<float> h(n);
    backend_->Download(h.data(), p, n * sizeof(float));
    return h;
  }
  void TearDown() override {
    comm_.reset();
    for (float* p : buffers_) backend_->Free(p);
  }

  testing::TempDir dir_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<NcclCommunicator> comm_;
  std::vector<float*> buffers_;
};

TEST_F(NcclOneGpu, AWorldOfOneOnDeviceMemory) {
  EXPECT_EQ(comm_->name(), "nccl");
  EXPECT_TRUE(comm_->device_memory());
  EXPECT_EQ(comm_->world(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "nccl.id")) << "rank 0 removes the id file once all joined";
}

TEST_F(NcclOneGpu, CollectivesOfOddSizes) {
  for (size_t n : {1u, 7u, 1001u, 4099u}) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = static_cast<float>(i % 17) + 0.25f;
    float* a = Device(v);
    float* out = Device(std::vector<float>(n, -1));
    ASSERT_TRUE(comm_->AllReduce(a, n, ReduceOp::kSum).ok());
    EXPECT_EQ(Host(a, n), v);
    CommHandle h = comm_->AllReduceAsync(a, out, n, ReduceOp::kMean);
    ASSERT_TRUE(h.Wait().ok());
    EXPECT_EQ(Host(out, n), v);
    ASSERT_TRUE(comm_->ReduceScatter(a, out, n, ReduceOp::kSum).ok());
    EXPECT_EQ(Host(out, n), v);
    ASSERT_TRUE(comm_->AllGather(a, out, n).ok());
    EXPECT_EQ(Host(out, n), v);
    ASSERT_TRUE(comm_->Broadcast(a, n, 0).ok());
    EXPECT_EQ(Host(a, n), v);
  }
}

TEST_F(NcclOneGpu, IntegersAndBarrier) {
  ASSERT_TRUE(comm_->Barrier().ok());
  Result<int64_t> any = comm_->AllReduceInt(1, IntOp::kMax);
  ASSERT_TRUE(any.ok()) << any.status().message();
  EXPECT_EQ(*any, 1);
  int64_t v[2] = {int64_t{1} << 40, -3};
  ASSERT_TRUE(comm_->AllReduceInt(v, 2, IntOp::kSum).ok());
  EXPECT_EQ(v[0], int64_t{1} << 40);
  EXPECT_EQ(v[1], -3);
}

}  // namespace
}  // namespace tern::dist
