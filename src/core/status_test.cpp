// Status/Result behaviour, and the proof that asserts are live in the build the tests run in (TERN_ASSERTS,
// the top-level CMakeLists.txt): the death tests below fail if assert() compiles to nothing.
#include "core/status.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument(fmt::format("{} is odd", x));
  return x / 2;
}

Status HalfTwice(int x, int* out) {
  TERN_ASSIGN_OR_RETURN(int h, Half(x));
  TERN_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST(Status, CarriesCodeAndContext) {
  const Status s = Status::NotFound("no such file").WithContext("loading config.yaml");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), "loading config.yaml: no such file");
  EXPECT_TRUE(Status::Ok().WithContext("ignored").ok());
}

TEST(Status, MacrosPropagateTheFirstError) {
  int out = 0;
  EXPECT_TRUE(HalfTwice(8, &out).ok());
  EXPECT_EQ(out, 2);
  const Status s = HalfTwice(6, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "3 is odd");
}

#ifdef NDEBUG
TEST(Asserts, LiveInTheTestBuild) { FAIL() << "NDEBUG is defined: configure with -DTERN_ASSERTS=ON"; }
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
