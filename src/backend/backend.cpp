#include "backend/backend.h"

namespace tern {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}

const char* ComputeName(Compute c) { return c == Compute::kBF16 ? "bf16" : "fp32"; }

}  // namespace tern
