// Inputs the fuzzers (fuzz/README.md) found that crashed a checkpoint-layer parser: each must now be a clear
// answer. One test per finding, named after the harness that found it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "ckpt/format.h"
#include "ckpt/preemption.h"
#include "ckpt/safetensors_image.h"

namespace tern::ckpt {
namespace {

// cloud_metadata: an instance-action body whose "action" or "time" is not a string made nlohmann's value()
// throw out of the poller thread (std::terminate: the trainer died on the notice meant to save it). The 200
// answer is a notice whatever its body: the default action and the default 120 s window.
TEST(FuzzRegression, CloudMetadataAwsFieldsOfTheWrongType) {
  for (const char* body : {R"({"action":5})", R"({"time":3})", R"({"action":null,"time":[1]})"}) {
    const PreemptionNotice n = ParseAwsInstanceAction(body);
    EXPECT_EQ(n.source, "aws spot instance-action: terminate") << body;
    EXPECT_EQ(n.window_s, 120.0) << body;
  }
  EXPECT_EQ(ParseAwsInstanceAction(R"({"action":"stop","time":5})").source, "aws spot instance-action: stop");
}

// checkpoint_json: a manifest whose "format" or "version" has another type made value() throw before the
// parser's own try block (`tern ckpt verify`, resume and serve died instead of naming the damaged file).
TEST(FuzzRegression, CheckpointJsonManifestFormatOrVersionOfTheWrongType) {
  for (const char* text :
       {R"({"format":1})", R"({"format":null,"step":1})", R"({"format":"tern-checkpoint","version":"x"})",
        R"({"format":"tern-checkpoint","version":1.5,"step":1,"files":[]})"}) {
    auto m = Manifest::Parse(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), Status::Code::kCorruption) << text << ": " << m.status().ToString();
  }
  auto good = Manifest::Parse(R"({"format":"tern-checkpoint","version":1,"step":2,"files":[]})");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->step, 2);
}

std::string Safetensors(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\0');
}

// safetensors: __metadata__ that is not an object (key() on a non-object iterator threw out of
// ParseSafetensors: checkpoint verify, load and serve died); data_offsets with one element (a read past the
// array); a shape of negative dimensions whose product wraps around to the byte count (accepted before).
TEST(FuzzRegression, SafetensorsMetadataOffsetsAndWrappingShape) {
  const std::string inputs[] = {
      Safetensors(R"({"__metadata__":"abc"})", 0),
      Safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
      Safetensors(R"({"a":{"dtype":"F32","shape":[-1,-1],"data_offsets":[0,4]}})", 4),
      Safetensors(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0),
  };
  for (const std::string& bytes : inputs) {
    auto p = ParseSafetensors(bytes);
    ASSERT_FALSE(p.ok()) << bytes.substr(8);
    EXPECT_EQ(p.status().code(), Status::Code::kCorruption) << p.status().ToString();
  }
  auto good = ParseSafetensors(Safetensors(R"({"a":{"dtype":"F32","shape":[2,0],"data_offsets":[0,0]},)"
                                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                           8));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(good->tensors.size(), 2u);
}

// The class of fuzz/bench_json's finding: a number too large (or fractional) for the integer it is read
// into is converted with undefined behaviour; the manifest's step and bytes and a tensor's shape and offsets
// must be whole numbers.
TEST(FuzzRegression, NumbersThatAreNotWholeAreCorruption) {
  for (
      const char* text :
      {R"({"format":"tern-checkpoint","version":1,"step":1e300,"files":[]})",
       R"({"format":"tern-checkpoint","version":1,"step":2,"files":[{"name":"a","bytes":-1e40,"xxh3":"0"}]})"}) {
    auto m = Manifest::Parse(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), Status::Code::kCorruption) << text;
  }
  for (const std::string& bytes :
       {Safetensors(R"({"a":{"dtype":"F32","shape":[1e300],"data_offsets":[0,4]}})", 4),
        Safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4e300]}})", 4),
        Safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-1,4]}})", 4)}) {
    auto p = ParseSafetensors(bytes);
    ASSERT_FALSE(p.ok()) << bytes.substr(8);
    EXPECT_EQ(p.status().code(), Status::Code::kCorruption) << p.status().ToString();
  }
}

}  // namespace
}  // namespace tern::ckpt
