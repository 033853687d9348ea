// Test helper of the data tests: a shard whose tokens are first, first+1, ..., so a window's tokens say where
// it came from (which source, which window).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "data/shard.h"
#include "testing/files.h"

namespace tern::testing {

inline std::string RampShard(const TempDir& dir, const std::string& name, int32_t first, size_t n,
                             uint32_t vocab = 65536) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<int32_t>(i);
  auto w = ShardWriter::Create(dir / name, vocab);
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Append(t).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  return dir / name;
}

}  // namespace tern::testing
