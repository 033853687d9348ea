// Test-only: the small prepared corpus the trainer tests train on, prepared in process once per ctest run
// (testing::SharedPreparedData shares it between the test processes).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "data/prepare.h"
#include "testing/processes.h"

namespace tern::testing {

// Returns the data directory (vocab 300, val fraction 0.1), or "" when preparing failed.
inline std::string SharedSmallPreparedData() {
  return testing::SharedPreparedData([](const std::string& corpus, const std::string& out) {
    PrepareOptions p;
    p.inputs = {corpus};
    p.out_dir = out;
    p.vocab_size = 300;
    p.val_fraction = 0.1;
    p.progress = nullptr;
    auto r = Prepare(p);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok();
  });
}

}  // namespace tern::testing
