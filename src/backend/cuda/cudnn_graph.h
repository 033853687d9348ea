// A small builder over cuDNN's backend (graph) API: tensors, matmul / pointwise / reduction / reshape
// operations, then (with a GPU) the operation graph, an engine from cuDNN's heuristics, an execution plan and
// its execution. cudnn_sdpa.{h,cpp} describes fused causal attention with it; attention_cudnn.cu runs it.
//
// cuDNN is loaded with dlopen on first use (Load), not linked: tern starts, and every other kernel runs, on a
// machine whose CUDA toolkit has no cuDNN; only train.attention=cudnn needs it. The header cudnn_graph.h
// gives the types; the functions come from the loaded library.
//
// Everything up to Build() runs without a GPU: cuDNN checks each tensor and each operation as it is finalized
// (shapes, strides, types), so a malformed graph is caught on any machine (cudnn_graph_test). Build() needs a
// handle, hence a GPU: the graph is checked as a whole there and cuDNN picks an engine.
#pragma once

#include <cudnn_graph.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tern {
namespace cudnn {

// The entry points tern uses, from the loaded library.
struct Api {
  decltype(&cudnnGetVersion) GetVersion;
  decltype(&cudnnGetErrorString) GetErrorString;
  decltype(&cudnnGetLastErrorString) GetLastErrorString;
  decltype(&cudnnCreate) Create;
  decltype(&cudnnDestroy) Destroy;
  decltype(&cudnnSetStream) SetStream;
  decltype(&cudnnBackendCreateDescriptor) CreateDescriptor;
  decltype(&cudnnBackendDestroyDescriptor) DestroyDescriptor;
  decltype(&cudnnBackendSetAttribute) SetAttribute;
  decltype(&cudnnBackendGetAttribute) GetAttribute;
  decltype(&cudnnBackendFinalize) Finalize;
  decltype(&cudnnBackendExecute) Execute;
};

// cuDNN 9, loaded once: $TERN_CUDNN_LIBRARY if set, else libcudnn.so.9 from the loader's search path (the
// binary's RUNPATH holds the CUDA toolkit's lib directory), else the toolkit's lib directory this build saw.
// Not ok (with what was tried and how to fix it) when none loads or its major version is not 9.
Result<const Api*> Load();

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  Desc(const Api* api, cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(Desc&& o) noexcept : api_(o.api_), d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  const Api* api_ = nullptr;
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Where a graph is built for: this process's GPU (its handle), or a GPU described by its properties, without
// one (cuDNN's device-less ahead-of-time build; DeviceFromJson): the tests check the attention graphs against
// an H100's description on machines without a GPU.
struct Target {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device = nullptr;
};

// A device-property descriptor from cuDNN's JSON description of a GPU (the fields of cudaDeviceProp that
// cuDNN reads: multiProcessorCount, deviceVer, ...).
Result<Desc> DeviceFromJson(const Api* api, const std::string& json);

class Graph {
 public:
  explicit Graph(const Api* api) : api_(api) {}

  // A tensor bound to memory at Execute by its uid (caller-chosen, below kFirstVirtual). dims and strides
  // in elements; every pointer must be 16-byte aligned.
  void Io(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type);
  // A scalar passed by value at Execute (a pointer to a host value of `type`), broadcast over 4-d tensors.
  void Scalar(int64_t uid, cudnnDataType_t type);
  // An intermediate that never reaches memory; returns its uid.
  int64_t Virtual(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type);

  // c = a @ b over the last two dimensions (batched over the others), fp32 accumulation.
  void Matmul(const char* name, int64_t a, int64_t b, int64_t c);
  // y = mode(x[, b[, t]]) elementwise with broadcasting, computed in `math`. GEN_INDEX takes `axis`.
  void Pointwise(const char* name, cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = -1,
                 int64_t t = -1, cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // y = op over the dimensions where y has extent 1 and x does not, in fp32.
  void Reduce(const char* name, cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x seen with y's dims and strides (a transpose of a virtual tensor, no data movement).
  void Reshape(const char* name, int64_t x, int64_t y);

  // The first error met while adding tensors and operations (which one, and cuDNN's own message); Ok if none.
  const Status& status() const { return status_; }
  size_t op_count() const { return ops_.size(); }

  // The operation graph, cuDNN's heuristic engine configurations for the target (mode A, then the fallback
  // list), and the first whose execution plan finalizes. Not ok when none does (the message says how many
  // were tried and cuDNN's last error). Only a plan built on a handle can Execute.
  [[nodiscard]] Status Build(const Target& target);
  int64_t workspace_bytes() const { return workspace_; }
  // Whether an engine took the graph and its execution plan was built: with a GPU, Build succeeded; in a
  // device-less build (no GPU driver, where Build cannot succeed) cuDNN generated and compiled the kernel and
  // only loading it into the driver failed.
  bool compiled() const { return compiled_; }
  // Runs the plan on the handle's stream. ptrs[i] is the device address (or, for a Scalar, the host value)
  // of tensor uids[i]; workspace holds workspace_bytes().
  [[nodiscard]] Status Execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                               const std::vector<void*>& ptrs, void* workspace) const;

  static constexpr int64_t kFirstVirtual = 1000;

 private:
  cudnnBackendDescriptor_t Find(int64_t uid);
  void AddTensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                 cudnnDataType_t type, bool is_virtual, bool by_value);
  // Records the first failure (naming `what` and cuDNN's message); false on failure.
  bool Check(cudnnStatus_t s, const std::string& what);
  bool Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
           const void* value, const std::string& what);
  // An operation's descriptor-valued attribute: a tensor by uid, or (uid -1) the operation's own descriptor.
  struct Port {
    cudnnBackendAttributeName_t attr;
    int64_t uid;
  };
  // Finalizes `desc` (when it is one: matmul, pointwise, reduction), then the operation of `type` with
  // `ports`.
  void AddOp(cudnnBackendDescriptorType_t type, const std::string& what, const std::vector<Port>& ports,
             Desc desc);

  const Api* api_;
  std::vector<std::pair<int64_t, Desc>> tensors_;
  std::vector<Desc> descs_;  // matmul / pointwise / reduction descriptors the operations refer to
  std::vector<Desc> ops_;
  Desc graph_, plan_;
  int64_t workspace_ = 0;
  bool compiled_ = false;
  int64_t next_virtual_ = kFirstVirtual;
  Status status_;
};

}  // namespace cudnn
}  // namespace tern
