// cuDNN backend-API graphs: see cudnn_graph.h.
#include "backend/cuda/cudnn_graph.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "fmt/format.h"

namespace tern {
namespace cudnn {
namespace {

// The handle attributes of the operation graph and the execution plan are deprecated in cuDNN 9 in favour of
// device-property descriptors, but the handle is still what a plan for this process's GPU is built with (as
// cudnn-frontend does); the numeric names keep the build free of deprecation warnings.
constexpr auto kOpGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);  // OPERATIONGRAPH_HANDLE
constexpr auto kPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);     // EXECUTION_PLAN_HANDLE

std::string LastError(const Api* api) {
  char buf[1024] = {0};
  api->GetLastErrorString(buf, sizeof(buf));
  return buf;
}

template <typename F>
bool Bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

Result<const Api*> Load() {
  static std::once_flag once;
  static Api api;
  static std::string error;
  std::call_once(once, [] {
    std::vector<std::string> tried;
    void* lib = nullptr;
    if (const char* env = std::getenv("TERN_CUDNN_LIBRARY"); env && *env) {
      tried.push_back(env);
      lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
      tried.push_back("libcudnn.so.9");
      lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
#ifdef TERN_CUDA_LIBRARY_DIR
      if (!lib) {
        tried.push_back(TERN_CUDA_LIBRARY_DIR "/libcudnn.so.9");
        lib = dlopen(TERN_CUDA_LIBRARY_DIR "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
      }
#endif
    }
    if (!lib) {
      error = fmt::format(
          "cuDNN 9 is not installed where tern looks (tried {}): install cuDNN 9 for this CUDA version, or "
          "set TERN_CUDNN_LIBRARY to its libcudnn.so.9; or use train.attention=flash",
          fmt::join(tried, ", "));
      return;
    }
    const bool ok = Bind(lib, "cudnnGetVersion", &api.GetVersion) &&
                    Bind(lib, "cudnnGetErrorString", &api.GetErrorString) &&
                    Bind(lib, "cudnnGetLastErrorString", &api.GetLastErrorString) &&
                    Bind(lib, "cudnnCreate", &api.Create) && Bind(lib, "cudnnDestroy", &api.Destroy) &&
                    Bind(lib, "cudnnSetStream", &api.SetStream) &&
                    Bind(lib, "cudnnBackendCreateDescriptor", &api.CreateDescriptor) &&
                    Bind(lib, "cudnnBackendDestroyDescriptor", &api.DestroyDescriptor) &&
                    Bind(lib, "cudnnBackendSetAttribute", &api.SetAttribute) &&
                    Bind(lib, "cudnnBackendGetAttribute", &api.GetAttribute) &&
                    Bind(lib, "cudnnBackendFinalize", &api.Finalize) &&
                    Bind(lib, "cudnnBackendExecute", &api.Execute);
    if (!ok) {
      error = fmt::format("{} lacks cuDNN 9's backend API ({}): install cuDNN 9", tried.back(), dlerror());
      return;
    }
    const size_t v = api.GetVersion();
    if (v / 10000 != 9) {
      error = fmt::format("{} is cuDNN {}; tern's attention graphs need cuDNN 9", tried.back(), v);
      api.GetVersion = nullptr;
    }
  });
  if (!error.empty()) return Status::Unavailable(error);
  return &api;
}

Desc::Desc(const Api* api, cudnnBackendDescriptorType_t type) : api_(api) {
  if (api_->CreateDescriptor(type, &d_) != CUDNN_STATUS_SUCCESS) d_ = nullptr;
}

Desc::~Desc() {
  if (d_) api_->DestroyDescriptor(d_);
}

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_) api_->DestroyDescriptor(d_);
    api_ = o.api_;
    d_ = std::exchange(o.d_, nullptr);
  }
  return *this;
}

bool Graph::Check(cudnnStatus_t s, const std::string& what) {
  if (!status_.ok()) return false;
  if (s == CUDNN_STATUS_SUCCESS) return true;
  status_ = Status::Internal(
      fmt::format("cuDNN refused {}: {} ({})", what, api_->GetErrorString(s), LastError(api_)));
  return false;
}

cudnnBackendDescriptor_t Graph::Find(int64_t uid) {
  for (auto& [u, d] : tensors_)
    if (u == uid) return d.get();
  if (status_.ok())
    status_ = Status::Internal(fmt::format("graph has no tensor {} (a bug in the graph)", uid));
  return nullptr;
}

void Graph::AddTensor(int64_t uid, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                      cudnnDataType_t type, bool is_virtual, bool by_value) {
  if (!status_.ok()) return;
  Desc t(api_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;
  cudnnBackendDescriptor_t d = t.get();
  const std::string what = fmt::format("tensor {} [{}]", uid, fmt::join(dims, ","));
  Check(d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_INTERNAL_ERROR, what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type), what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
                               static_cast<int64_t>(dims.size()), dims.data()),
            what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
                               static_cast<int64_t>(strides.size()), strides.data()),
            what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment), what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual), what) &&
      Check(api_->SetAttribute(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value), what) &&
      Check(api_->Finalize(d), what);
  tensors_.emplace_back(uid, std::move(t));
}

void Graph::Io(int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type) {
  AddTensor(uid, dims, strides, type, false, false);
}

void Graph::Scalar(int64_t uid, cudnnDataType_t type) {
  AddTensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, type, false, true);
}

int64_t Graph::Virtual(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type) {
  const int64_t uid = next_virtual_++;
  AddTensor(uid, dims, strides, type, true, false);
  return uid;
}

bool Graph::Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t attr,
                cudnnBackendAttributeType_t type, const void* value, const std::string& what) {
  return Check(api_->SetAttribute(d, attr, type, 1, value), what);
}

void Graph::AddOp(cudnnBackendDescriptorType_t type, const std::string& what, const std::vector<Port>& ports,
                  Desc desc) {
  if (desc.get() && !Check(api_->Finalize(desc.get()), what)) return;
  Desc op(api_, type);
  for (const Port& p : ports) {
    cudnnBackendDescriptor_t d = p.uid >= 0 ? Find(p.uid) : desc.get();
    if (!d || !Set(op.get(), p.attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d, what)) return;
  }
  if (!Check(api_->Finalize(op.get()), what)) return;
  if (desc.get()) descs_.push_back(std::move(desc));
  ops_.push_back(std::move(op));
}

void Graph::Matmul(const char* name, int64_t a, int64_t b, int64_t c) {
  if (!status_.ok()) return;
  const std::string what = fmt::format("matmul {}", name);
  Desc desc(api_, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  if (!Set(desc.get(), CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp, what)) return;
  AddOp(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what,
        {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
         {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
         {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c},
         {CUDNN_ATTR_OPERATION_MATMUL_DESC, -1}},
        std::move(desc));
}

void Graph::Pointwise(const char* name, cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t,
                      cudnnDataType_t math, int64_t axis) {
  if (!status_.ok()) return;
  const std::string what = fmt::format("pointwise {}", name);
  Desc desc(api_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  if (!Set(desc.get(), CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, what) ||
      !Set(desc.get(), CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &math, what) ||
      (mode == CUDNN_POINTWISE_GEN_INDEX &&
       !Set(desc.get(), CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis, what)))
    return;
  std::vector<Port> ports = {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, -1},
                             {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x}};
  if (b >= 0) ports.push_back({CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b});
  if (t >= 0) ports.push_back({CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t});
  ports.push_back({CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y});
  AddOp(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what, ports, std::move(desc));
}

void Graph::Reduce(const char* name, cudnnReduceTensorOp_t reduce, int64_t x, int64_t y) {
  if (!status_.ok()) return;
  const std::string what = fmt::format("reduction {}", name);
  Desc desc(api_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  if (!Set(desc.get(), CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &reduce, what) ||
      !Set(desc.get(), CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp, what))
    return;
  AddOp(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what,
        {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x},
         {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y},
         {CUDNN_ATTR_OPERATION_REDUCTION_DESC, -1}},
        std::move(desc));
}

void Graph::Reshape(const char* name, int64_t x, int64_t y) {
  if (!status_.ok()) return;
  AddOp(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, fmt::format("reshape {}", name),
        {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}}, Desc());
}

Result<Desc> DeviceFromJson(const Api* api, const std::string& json) {
  Desc d(api, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  cudnnStatus_t s = d.get()
                        ? api->SetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
                                            CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size()), json.data())
                        : CUDNN_STATUS_INTERNAL_ERROR;
  if (s == CUDNN_STATUS_SUCCESS) s = api->Finalize(d.get());
  if (s != CUDNN_STATUS_SUCCESS)
    return Status::InvalidArgument(
        fmt::format("cuDNN refused the device description: {} ({})", api->GetErrorString(s), LastError(api)));
  return d;
}

Status Graph::Build(const Target& target) {
  if (!status_.ok()) return status_;
  cudnnHandle_t handle = target.handle;
  cudnnBackendDescriptor_t device = target.device;
  graph_ = Desc(api_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Desc& op : ops_) ops.push_back(op.get());
  if (!Check(api_->SetAttribute(graph_.get(), CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                static_cast<int64_t>(ops.size()), ops.data()),
             "the operation graph") ||
      (handle && !Check(api_->SetAttribute(graph_.get(), kOpGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle),
                        "the operation graph")) ||
      !Check(api_->Finalize(graph_.get()), "the operation graph"))
    return status_;
  int tried = 0;
  std::string last;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(api_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendDescriptor_t g = graph_.get();
    if (api_->SetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                           1, &g) != CUDNN_STATUS_SUCCESS ||
        api_->SetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) !=
            CUDNN_STATUS_SUCCESS ||
        (device && api_->SetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_DEVICEPROP,
                                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device) != CUDNN_STATUS_SUCCESS) ||
        api_->Finalize(heur.get()) != CUDNN_STATUS_SUCCESS) {
      last = LastError(api_);
      continue;
    }
    int64_t count = 0;
    if (api_->GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                           &count, nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0) {
      last = LastError(api_);
      continue;
    }
    std::vector<Desc> cfgs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; i++) {
      cfgs.emplace_back(api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    if (api_->GetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                           &got, raw.data()) != CUDNN_STATUS_SUCCESS) {
      last = LastError(api_);
      continue;
    }
    for (int64_t i = 0; i < got; i++) {
      tried++;
      Desc plan(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      cudnnBackendDescriptor_t cfg = raw[i];
      if ((handle && api_->SetAttribute(plan.get(), kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle) !=
                         CUDNN_STATUS_SUCCESS) ||
          (device && api_->SetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &device) != CUDNN_STATUS_SUCCESS) ||
          api_->SetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg) != CUDNN_STATUS_SUCCESS) {
        last = LastError(api_);
        continue;
      }
      const cudnnStatus_t fin = api_->Finalize(plan.get());
      if (fin == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER && !handle) {
        // A device-less build: the engine took the graph and compiled its kernel; there is no driver to load
        // it.
        compiled_ = true;
        return Status::Unavailable(
            fmt::format("cuDNN compiled engine configuration {} of the graph for the "
                        "described GPU; no GPU driver here to load it ({})",
                        tried, LastError(api_)));
      }
      if (fin != CUDNN_STATUS_SUCCESS) {
        last = LastError(api_);
        continue;
      }
      compiled_ = true;
      int64_t ws = 0, n = 0;
      if (api_->GetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                             &ws) != CUDNN_STATUS_SUCCESS) {
        last = LastError(api_);
        continue;
      }
      plan_ = std::move(plan);
      workspace_ = ws;
      return Status::Ok();
    }
  }
  return Status::Unavailable(fmt::format(
      "cuDNN has no engine for this graph ({} operations; {} engine configurations tried; last error: {})",
      ops_.size(), tried, last.empty() ? "none" : last));
}

Status Graph::Execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                      void* workspace) const {
  if (!plan_.get()) return Status::Internal("cudnn::Graph::Execute before a successful Build (a bug)");
  Desc pack(api_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  cudnnStatus_t s = api_->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       static_cast<int64_t>(uids.size()), uids.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = api_->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                           static_cast<int64_t>(ptrs.size()), ptrs.data());
  if (s == CUDNN_STATUS_SUCCESS)
    s = api_->SetAttribute(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (s == CUDNN_STATUS_SUCCESS) s = api_->Finalize(pack.get());
  if (s == CUDNN_STATUS_SUCCESS) s = api_->Execute(handle, plan_.get(), pack.get());
  if (s != CUDNN_STATUS_SUCCESS)
    return Status::Internal(
        fmt::format("cuDNN execution failed: {} ({})", api_->GetErrorString(s), LastError(api_)));
  return Status::Ok();
}

}  // namespace cudnn
}  // namespace tern
