#include "ckpt/safetensors_image.h"

#include <fmt/ranges.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

namespace tern::ckpt {

size_t TensorSpec::numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

void SafetensorsImage::Free::operator()(char* p) const {
  std::free(p);
}

SafetensorsImage::SafetensorsImage(const std::vector<TensorSpec>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  size_t offset = 0;
  for (const auto& t : tensors) {
    element_offsets_.push_back(offset / 4);
    const size_t bytes = t.numel() * 4;
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned, as the format asks
  data_offset_ = 8 + json.size();
  size_ = data_offset_ + offset;
  constexpr size_t kAlign = 2u << 20;
  const size_t alloc = (size_ + kAlign - 1) / kAlign * kAlign;
  buf_.reset(static_cast<char*>(std::aligned_alloc(kAlign, alloc)));
  if (!buf_) throw std::bad_alloc();
  ::madvise(buf_.get(), alloc, MADV_HUGEPAGE);  // a hint; harmless where transparent huge pages are off
  const uint64_t hlen = json.size();
  std::memcpy(buf_.get(), &hlen, 8);  // little-endian host (x86-64, aarch64)
  std::memcpy(buf_.get() + 8, json.data(), json.size());
}

Result<ParsedSafetensors> ParseSafetensors(std::string_view bytes) {
  auto bad = [](const std::string& what) { return Status::Corruption("safetensors: " + what); };
  if (bytes.size() < 8)
    return bad(fmt::format("{} bytes is shorter than the 8-byte header length", bytes.size()));
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  if (hlen > bytes.size() - 8)
    return bad(fmt::format("header length {} runs past the end of the file", hlen));
  auto header = nlohmann::json::parse(bytes.substr(8, hlen), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return bad("header is not a JSON object");
  ParsedSafetensors out;
  const std::string_view data = bytes.substr(8 + hlen);
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      return bad("tensor " + it.key() + " lacks dtype/shape/data_offsets");
    TensorView v;
    try {
      v.dtype = e["dtype"].get<std::string>();
      if (!e["shape"].is_array()) return bad("tensor " + it.key() + ": shape is not a list of whole numbers");
      for (const auto& d : e["shape"])
        if (!d.is_number_integer())
          return bad("tensor " + it.key() + ": shape is not a list of whole numbers");
      v.shape = e["shape"].get<std::vector<int64_t>>();
      if (!e["data_offsets"].is_array() || e["data_offsets"].size() != 2 ||
          !e["data_offsets"][0].is_number_unsigned() || !e["data_offsets"][1].is_number_unsigned())
        return bad("tensor " + it.key() + ": data_offsets is not [begin, end]");
      const uint64_t begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
      if (begin > end || end > data.size())
        return bad(fmt::format("tensor {} data [{}, {}) outside the {} data bytes", it.key(), begin, end,
                               data.size()));
      uint64_t numel = 1;
      for (int64_t d : v.shape) {
        // A negative or huge dimension could wrap the product around to the right byte count.
        if (d < 0 || (d > 0 && numel > (uint64_t{1} << 60) / static_cast<uint64_t>(d)))
          return bad(fmt::format("tensor {} has shape [{}]: a dimension is negative or the size overflows",
                                 it.key(), fmt::join(v.shape, ", ")));
        numel *= static_cast<uint64_t>(d);
      }
      const uint64_t elem = v.dtype == "F32" || v.dtype == "I32"   ? 4
                            : v.dtype == "F64" || v.dtype == "I64" ? 8
                                                                   : 2;
      if (numel * elem != end - begin)
        return bad(
            fmt::format("tensor {} holds {} bytes, its shape needs {}", it.key(), end - begin, numel * elem));
      v.data = data.substr(begin, end - begin);
    } catch (const nlohmann::json::exception& ex) {
      return bad("tensor " + it.key() + ": " + ex.what());
    }
    out.tensors.emplace(it.key(), std::move(v));
  }
  return out;
}

}  // namespace tern::ckpt
