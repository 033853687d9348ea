// Status and Result: codes, messages, context, and the two early-return macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tern {
namespace {

using Code = Status::Code;

TEST(Status, DefaultIsOkWithNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(Status, EachCodeKeepsItsMessageAndNamesItself) {
  struct Case {
    Status status;
    Code code;
    std::string text;
  };
  const std::vector<Case> cases = {
      {Status::InvalidArgument("bad"), Code::kInvalidArgument, "invalid argument: bad"},
      {Status::NotFound("bad"), Code::kNotFound, "not found: bad"},
      {Status::IoError("bad"), Code::kIoError, "I/O error: bad"},
      {Status::Corruption("bad"), Code::kCorruption, "corruption: bad"},
      {Status::Unavailable("bad"), Code::kUnavailable, "unavailable: bad"},
      {Status::Internal("bad"), Code::kInternal, "internal error: bad"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "bad");
    EXPECT_EQ(c.status.ToString(), c.text);
  }
}

TEST(Status, WithContextPrefixesTheMessageAndKeepsTheCode) {
  const Status s =
      Status::NotFound("no such file").WithContext("reading a.yaml").WithContext("loading config");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "loading config: reading a.yaml: no such file");
  EXPECT_EQ(s.ToString(), "not found: loading config: reading a.yaml: no such file");
  const Status ok = Status::Ok().WithContext("loading config");
  EXPECT_TRUE(ok.ok()) << "context on success changes nothing";
  EXPECT_EQ(ok.message(), "");
}

TEST(Result, HoldsAValueOrTheStatusWhy) {
  Result<std::string> good = std::string("value");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value(), "value");
  EXPECT_EQ(*good, "value");
  EXPECT_EQ(good->size(), 5u);
  EXPECT_TRUE(good.status().ok());
  good->append("!");
  EXPECT_EQ(good.value(), "value!");

  Result<std::string> bad = Status::Corruption("torn");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorruption);
  EXPECT_EQ(bad.status().message(), "torn");
}

TEST(Result, MovesAMoveOnlyValueOut) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

// Helpers for the macros: `reached` counts the statements after the macro that ran.
Status Check(bool fail) {
  return fail ? Status::IoError("disk") : Status::Ok();
}

Status TwoChecks(bool fail_first, bool fail_second, int* reached) {
  TERN_RETURN_IF_ERROR(Check(fail_first));
  ++*reached;
  TERN_RETURN_IF_ERROR(Check(fail_second).WithContext("second"));
  ++*reached;
  return Status::Ok();
}

TEST(StatusMacros, ReturnIfErrorStopsAtTheFirstFailure) {
  int reached = 0;
  EXPECT_TRUE(TwoChecks(false, false, &reached).ok());
  EXPECT_EQ(reached, 2);

  reached = 0;
  Status s = TwoChecks(true, false, &reached);
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(), "disk");
  EXPECT_EQ(reached, 0);

  reached = 0;
  s = TwoChecks(false, true, &reached);
  EXPECT_EQ(s.message(), "second: disk");
  EXPECT_EQ(reached, 1);
}

Result<std::unique_ptr<int>> Make(int v) {
  if (v < 0) return Status::InvalidArgument("negative");
  return std::make_unique<int>(v);
}

// Two assignments in one function (the macro's temporary is named per line), a move-only value.
Result<int> Sum(int a, int b, int* reached) {
  TERN_ASSIGN_OR_RETURN(auto x, Make(a));
  ++*reached;
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<int> y, Make(b));
  ++*reached;
  return *x + *y;
}

TEST(StatusMacros, AssignOrReturnDeclaresTheValueOrReturnsTheStatus) {
  int reached = 0;
  Result<int> r = Sum(2, 3, &reached);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value(), 5);
  EXPECT_EQ(reached, 2);

  reached = 0;
  r = Sum(-1, 3, &reached);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "negative");
  EXPECT_EQ(reached, 0);

  reached = 0;
  r = Sum(1, -3, &reached);
  EXPECT_EQ(r.status().message(), "negative");
  EXPECT_EQ(reached, 1);
}

}  // namespace
}  // namespace tern
