// A test that cannot run here (a program or file it needs is missing) says why: skipped on a developer's
// machine, failed in CI. CI runs `CI=true bash .ci/run`, and its fast suite skips nothing but the GPU tests
// (testing/cuda.h skips those with GTEST_SKIP directly).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

namespace tern::testing {

// The environment variable CI is set (and not "0" or "false").
inline bool InCi() {
  const char* ci = std::getenv("CI");
  if (!ci || !*ci) return false;
  const std::string_view v(ci);
  return v != "0" && v != "false";
}

}  // namespace tern::testing

// TERN_SKIP_OR_FAIL_IN_CI("moto_server is not on PATH; " << how_to_get_it);
// Returns from the test (or SetUp) with a skip, or with a failure when CI is set. The message may stream.
#define TERN_SKIP_OR_FAIL_IN_CI(message)                                   \
  do {                                                                     \
    if (::tern::testing::InCi())                                           \
      GTEST_FAIL() << "CI is set, so this test may not skip: " << message; \
    else                                                                   \
      GTEST_SKIP() << message;                                             \
  } while (0)
