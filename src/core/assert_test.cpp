// The proof that asserts are live in the build the tests run in (TERN_ASSERTS, the top-level CMakeLists.txt):
// the death tests below fail if assert() compiles to nothing.
#include "core/status.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(fmt::format("{} is odd", x));
  return x / 2;
}

#ifdef NDEBUG
TEST(Asserts, LiveInTheTestBuild) {
  FAIL() << "NDEBUG is defined: configure with -DTERN_ASSERTS=ON";
}
#endif

// A Result made from an OK Status is a programmer bug (core/status.h says so): the assert fires.
TEST(AssertsDeathTest, ResultFromOkStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH({ Result<int> r(Status::Ok()); }, "ok\\(\\)");
}

// So is reading the value of an error without checking ok().
TEST(AssertsDeathTest, ValueOfAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH({ Half(3).value(); }, "ok\\(\\)");
}

}  // namespace
}  // namespace tern
