// A token shard's header (ParseShardHeader, what ShardReader::Open checks before it trusts a mapped file).
// The input is the start of the file; its length is the input's length, or, when the input is shorter than
// the header, the header's size plus the last 4 bytes read as a count (so lengths that disagree are tried).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "data/shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  uint64_t file_len = size;
  if (size >= tern::kShardHeaderBytes + 8 && data[tern::kShardHeaderBytes] == 0xff) {
    std::memcpy(&file_len, data + size - 8, 8);  // a claimed length far from the bytes present
  }
  auto h = tern::ParseShardHeader(head, file_len, "fuzz.bin");
  if (h.ok()) {
    // Open maps file_len bytes and reads tokens [0, count): they must lie inside the file.
    if (h->count > (file_len - tern::kShardHeaderBytes) / h->bytes_per_token) __builtin_trap();
  }
  return 0;
}
