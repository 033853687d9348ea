// Inputs the pipeline_spec fuzzer (fuzz/README.md) found that crashed ParsePipelineSpec: each must now be a
// clear error naming the file and the line.
#include <gtest/gtest.h>

#include <string>

#include "pipeline/pipeline_spec.h"

namespace tern::pipeline {
namespace {

// A key that is a list or a mapping (the fuzzer's own: `[namM-~M-^?e:g: c]:  rs:/;z}$`, a flow list as the
// top-level key) made yaml-cpp's as<std::string>() throw out of CheckKeys: `tern pipeline` died of an
// uncaught YAML::TypedBadConversion instead of exiting 2 with a message.
TEST(FuzzRegression, PipelineSpecKeyThatIsAListOrMapping) {
  struct Case {
    std::string yaml, says;
  };
  for (const Case& c : {
           Case{"[nam\xfe\xff"
                "e:g: c]:  rs:/;z}\n",
                "a key in `the top level` (line 1) is a list or a mapping"},
           Case{"name: m\ntrain: {model: r}\ncompare:\n  ? [alias]\n  : prod\n",
                "a key in `compare` (line 4)"},
           Case{"name: m\ntrain: {{config: c}: 1}\n", "a key in `train` (line 2)"},
       }) {
    auto s = ParsePipelineSpec(c.yaml, "p.yaml");
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().rfind("p.yaml: ", 0), 0u) << s.status().message();
  }
}

}  // namespace
}  // namespace tern::pipeline
