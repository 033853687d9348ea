// A test suite that shares one moto_server (an S3 API on loopback, signatures checked) among its tests:
//
//   constexpr char kBucket[] = "ckpt";
//   class S3Test : public testing::MotoSuite<kBucket> { ... moto_->endpoint ... };
//
// Each test starts with moto's credentials and region exported, or skips (fails in CI) when moto_server or
// the aws CLI is missing. A fixture that adds its own SetUp calls MotoSuite::SetUp() first and returns when
// the test is skipped or failed.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>

#include "testing/processes.h"
#include "testing/skip.h"

namespace tern::testing {

template <const char* kBucket>
class MotoSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { moto_ = StartMoto(kBucket).release(); }
  static void TearDownTestSuite() {
    delete moto_;
    moto_ = nullptr;
  }
  void SetUp() override {
    if (!moto_->skip_reason.empty()) TERN_SKIP_OR_FAIL_IN_CI("no S3 server: " << moto_->skip_reason);
    ::setenv("AWS_ACCESS_KEY_ID", moto_->key_id.c_str(), 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", moto_->secret.c_str(), 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
  }
  // True when SetUp skipped or failed the test: a derived SetUp returns then.
  static bool Stopped() { return IsSkipped() || HasFatalFailure(); }
  static inline Moto* moto_ = nullptr;
};

}  // namespace tern::testing
