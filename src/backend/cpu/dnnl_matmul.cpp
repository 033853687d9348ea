#include "backend/cpu/dnnl_matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

namespace tern {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Key {
  int m, n, k;
  uint32_t beta_bits;
  uint8_t flags;  // bit 0 trans_a, 1 trans_b, 2 bias, 3 bf16 operands, 4 bf16 product
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && beta_bits == o.beta_bits && flags == o.flags;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t(uint32_t(key.m)), uint64_t(uint32_t(key.n)), uint64_t(uint32_t(key.k)),
                       uint64_t(key.beta_bits), uint64_t(key.flags)}) {
      h = (h ^ v) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// Tall products (many rows of A, a small B: the LM head's dweight) run faster when B is first reordered into
// oneDNN's blocked layout once per call, instead of being re-packed by every thread for every block of rows.
bool PrepackWeights(int M, int N, int K) {
  return M >= 4096 && M >= 8 * std::max(N, K);
}

}  // namespace

struct DnnlMatmul::Entry {
  bool ok = false;  // false: oneDNN has no implementation (cached so that we ask only once)
  dnnl::matmul prim;
  dnnl::memory a, b, bias, c;
  dnnl::reorder pack;     // when prepacking: user B -> packed_b
  dnnl::memory packed_b;  // oneDNN-owned
  std::unordered_map<int, dnnl::memory> args;
  std::string impl;
};

struct DnnlMatmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> cache;
};

DnnlMatmul::DnnlMatmul() : impl_(std::make_unique<Impl>()) {}
DnnlMatmul::~DnnlMatmul() = default;

size_t DnnlMatmul::CachedPrimitives() const {
  return impl_->cache.size();
}

DnnlMatmul::Entry* DnnlMatmul::Lookup(DType dtype, bool has_bias, int M, int N, int K, bool trans_a,
                                      bool trans_b, float beta, bool bf16_out) {
  Key key{M, N, K, 0, 0};
  std::memcpy(&key.beta_bits, &beta, 4);
  key.flags = static_cast<uint8_t>((trans_a ? 1 : 0) | (trans_b ? 2 : 0) | (has_bias ? 4 : 0) |
                                   (dtype == DType::kBF16 ? 8 : 0) | (bf16_out ? 16 : 0));
  auto it = impl_->cache.find(key);
  if (it != impl_->cache.end()) return it->second.get();

  auto entry = std::make_unique<Entry>();
  const dt in = dtype == DType::kBF16 ? dt::bf16 : dt::f32;
  const dnnl::memory::dim m = M, n = N, k = K;
  dnnl::memory::desc a_md({m, k}, in, trans_a ? tag::ba : tag::ab);
  dnnl::memory::desc b_md({k, n}, in, trans_b ? tag::ba : tag::ab);
  dnnl::memory::desc bias_md({1, n}, dt::f32, tag::ab);
  dnnl::memory::desc c_md({m, n}, bf16_out ? dt::bf16 : dt::f32, tag::ab);
  try {
    dnnl::primitive_attr attr;
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const bool prepack = PrepackWeights(M, N, K);
    dnnl::memory::desc w_md = prepack ? dnnl::memory::desc({k, n}, in, tag::any) : b_md;
    auto desc =
        has_bias ? dnnl::matmul::desc(a_md, w_md, bias_md, c_md) : dnnl::matmul::desc(a_md, w_md, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, impl_->engine);
    entry->prim = dnnl::matmul(pd);
    entry->impl = pd.impl_info_str();
    auto& eng = impl_->engine;
    entry->a = dnnl::memory(a_md, eng, DNNL_MEMORY_NONE);
    entry->b = dnnl::memory(b_md, eng, DNNL_MEMORY_NONE);
    entry->c = dnnl::memory(c_md, eng, DNNL_MEMORY_NONE);
    dnnl::memory weights = entry->b;
    if (prepack && pd.weights_desc() != b_md) {
      entry->packed_b = dnnl::memory(pd.weights_desc(), eng);
      entry->pack = dnnl::reorder(entry->b, entry->packed_b);
      weights = entry->packed_b;
      entry->impl += " (weights prepacked)";
    }
    entry->args = {{DNNL_ARG_SRC, entry->a}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, entry->c}};
    if (has_bias) {
      entry->bias = dnnl::memory(bias_md, eng, DNNL_MEMORY_NONE);
      entry->args[DNNL_ARG_BIAS] = entry->bias;
    }
    entry->ok = true;
  } catch (const dnnl::error& e) {
    if (dtype == DType::kBF16) {
      // A CPU without AVX512-BF16 or AMX has no bf16 matmul at all: say so once, not once per shape.
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        std::fprintf(
            stderr,
            "tern: oneDNN has no bf16 matmul on this CPU (it needs AVX512-BF16 or AMX); bf16 matmuls run "
            "in fp32 on bf16-rounded operands\n");
    } else {
      std::fprintf(stderr, "tern: oneDNN matmul %s M=%d N=%d K=%d unavailable (%s); using the fallback\n",
                   DTypeName(dtype), M, N, K, e.what());
    }
    entry->ok = false;
  }
  return impl_->cache.emplace(key, std::move(entry)).first->second.get();
}

bool DnnlMatmul::Run(float* c, const void* a, const void* b, DType dtype, const float* bias, int M, int N,
                     int K, bool trans_a, bool trans_b, float beta) {
  return Execute(Lookup(dtype, bias != nullptr, M, N, K, trans_a, trans_b, beta, false), c, a, b, bias);
}

bool DnnlMatmul::RunToBF16(uint16_t* c, const void* a, const void* b, DType dtype, const float* bias, int M,
                           int N, int K, bool trans_a, bool trans_b) {
  return Execute(Lookup(dtype, bias != nullptr, M, N, K, trans_a, trans_b, 0.0f, true), c, a, b, bias);
}

bool DnnlMatmul::Execute(Entry* e, void* c, const void* a, const void* b, const float* bias) {
  if (!e->ok) return false;
  e->a.set_data_handle(const_cast<void*>(a));
  e->b.set_data_handle(const_cast<void*>(b));
  e->c.set_data_handle(c);
  if (bias) e->bias.set_data_handle(const_cast<float*>(bias));
  if (e->packed_b) e->pack.execute(impl_->stream, e->b, e->packed_b);
  e->prim.execute(impl_->stream, e->args);
  impl_->stream.wait();
  return true;
}

std::string DnnlMatmul::ImplName(DType dtype, bool has_bias, int M, int N, int K, bool trans_a, bool trans_b,
                                 float beta) {
  Entry* e = Lookup(dtype, has_bias, M, N, K, trans_a, trans_b, beta, false);
  return e->ok ? e->impl : std::string();
}

}  // namespace tern
