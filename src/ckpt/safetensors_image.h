// safetensors files (https://github.com/huggingface/safetensors) assembled in, and parsed from, host
// memory: an 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {string: string}} padded with spaces to a multiple of 8, then the raw tensor data.
//
// The checkpoint snapshot is built straight into a SafetensorsImage: the header is fixed when the image is
// made, so a save only copies tensor bytes into data() (one device-to-host copy per buffer, no
// serialisation in the training stall) and the writer thread hands bytes() to Storage::Put unchanged.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::ckpt {

// One fp32 tensor; tensors are stored back to back in the order given.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  size_t numel() const;
};

class SafetensorsImage {
 public:
  SafetensorsImage(const std::vector<TensorSpec>& tensors,
                   const std::map<std::string, std::string>& metadata);
  SafetensorsImage(const SafetensorsImage&) = delete;
  SafetensorsImage& operator=(const SafetensorsImage&) = delete;

  // The whole file.
  std::string_view bytes() const { return {buf_.get(), size_}; }
  // Start of the tensor data: all tensors back to back, so a flat buffer laid out the same way (the
  // model's parameter buffer) fills it with one copy.
  float* data() { return reinterpret_cast<float*>(buf_.get() + data_offset_); }
  size_t data_bytes() const { return size_ - data_offset_; }
  float* tensor(size_t i) { return data() + element_offsets_[i]; }

 private:
  struct Free {
    void operator()(char* p) const;
  };
  std::unique_ptr<char, Free> buf_;  // 2 MiB aligned; advised for huge pages (fewer faults, faster copies)
  size_t size_ = 0, data_offset_ = 0;
  std::vector<size_t> element_offsets_;
};

struct TensorView {
  std::string dtype;  // "F32", ...
  std::vector<int64_t> shape;
  std::string_view data;
};

struct ParsedSafetensors {
  std::map<std::string, std::string> metadata;
  std::map<std::string, TensorView> tensors;  // views into the parsed bytes
};

// Checks the header (length, JSON, offsets inside the file, sizes matching dtype x shape). Corruption names
// the problem.
Result<ParsedSafetensors> ParseSafetensors(std::string_view bytes);

}  // namespace tern::ckpt
