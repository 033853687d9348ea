// Inputs the safetensors fuzzer (fuzz/README.md) found that crashed the exported-model loader: each must now
// be a clear Corruption naming the file.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "model/safetensors.h"

namespace tern {
namespace {

std::string Safetensors(const std::string& header) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header;
}

constexpr char kShape[] =
    R"("__metadata__":{"tern.n_layer":"1","tern.n_head":"1","tern.n_embd":"4","tern.vocab_size":"4",)"
    R"("tern.block_size":"4"})";

// __metadata__ that is not an object (iterating it called key() on a non-object: invalid_iterator thrown);
// a tensor entry without data_offsets (const operator[] on a missing key: an assertion, undefined without
// one); an entry that is a number (operator[] threw type_error); a shape of 10^15 parameters in a file of a
// few bytes (a 10 TB allocation before any tensor was checked).
TEST(FuzzRegression, SafetensorsGptLoaderBadMetadataEntriesAndShape) {
  const std::string inputs[] = {
      Safetensors(R"({"__metadata__":"abc"})"),
      Safetensors(std::string("{") + kShape + R"(,"transformer.wte.weight":{"dtype":"F32","shape":[4,4]}})") +
          std::string(2048, '\0'),
      Safetensors(std::string("{") + kShape + R"(,"transformer.wte.weight":5})") + std::string(2048, '\0'),
      Safetensors(R"({"__metadata__":{"tern.n_layer":"1000","tern.n_head":"1","tern.n_embd":"100000",)"
                  R"("tern.vocab_size":"100000","tern.block_size":"100000"}})"),
      Safetensors("[1]"),
  };
  for (const std::string& bytes : inputs) {
    auto w = ParseGptSafetensors(bytes, "m.safetensors");
    ASSERT_FALSE(w.ok()) << bytes.substr(8);
    EXPECT_EQ(w.status().code(), Status::Code::kCorruption) << w.status().ToString();
    EXPECT_NE(w.status().message().find("m.safetensors"), std::string::npos) << w.status().message();
  }
}

}  // namespace
}  // namespace tern
