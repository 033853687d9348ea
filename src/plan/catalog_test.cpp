// Catalog loading: errors name file:line, suspicious rows warn, the shipped catalog loads clean.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "plan/catalog.h"

namespace tern::plan {
namespace {

const char* kGpus =
    "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,mem_gib,interconnect,"
    "interconnect_gbps\n"
    "H100,NVIDIA,SXM5,67,494.5,989.5,80,NVLink 4,900\n"
    "L4,NVIDIA,PCIe,30.3,60,121,24,PCIe Gen4 x16,64\n";
const char* kHeader =
    "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_hr\n";

Result<Catalog> Load(const std::string& instances) {
  return LoadCatalogFromTexts({{"gpus.csv", kGpus}, {"my.csv", instances}}, PlanDefaults());
}

std::string ErrorOf(const std::string& instances) {
  Result<Catalog> c = Load(instances);
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(Catalog, LoadsRowsAndJoinsGpuMemory) {
  Result<Catalog> c = Load(std::string(kHeader) + "aws,us-east-1,p5.48xlarge,H100,8,,192,2048,55.04,12.69\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->offers.size(), 1u);
  EXPECT_EQ(c->offers[0].gpu_mem_gib, 80);  // empty gpu_mem_gib: from gpus.csv
  EXPECT_EQ(c->offers[0].where, "my.csv:2: ");
  EXPECT_TRUE(c->warnings.empty());
}

TEST(Catalog, MalformedRowsAreErrorsWithFileAndLine) {
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,us-east-1,p5.48xlarge,H100,8,80,192,2048,55.04\n"),
            "my.csv:2: expected 10 fields (as in the header), got 9");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,us-east-1,a,H100,8,80,192,2048,55.04,1\n"
                                           "aws,us-east-1,b,H100,8,80,192,2048,abc,1\n"),
            "my.csv:3: column 'price_ondemand_hr': 'abc' is not a number");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,us-east-1,a,H100,0,80,192,2048,55.04,1\n"),
            "my.csv:2: column 'gpu_count': '0' is not a positive integer up to 1024");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + ",us-east-1,a,H100,8,80,192,2048,55.04,1\n"),
            "my.csv:2: column 'provider' is empty");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,us-east-1,a,H100,8,80,192,2048,-1,1\n"),
            "my.csv:2: column 'price_ondemand_hr': -1 is negative");
  // Found by fuzz/catalog_csv (bench/fuzz.sh, 2026-12-02): a 54-digit count was cast to int (UB). A count
  // above any instance's is refused with the limit named.
  EXPECT_EQ(
      ErrorOf(
          std::string(kHeader) +
          "aws,us-east-1,a,H100,188888888888888888888888888888888888888888888888888888,80,192,2048,5,1\n"),
      "my.csv:2: column 'gpu_count': '188888888888888888888888888888888888888888888888888888' is not a "
      "positive integer up to 1024");
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "aws,us-east-1,a,H100,1025,80,192,2048,5,1\n"),
            "my.csv:2: column 'gpu_count': '1025' is not a positive integer up to 1024");
  EXPECT_TRUE(Load(std::string(kHeader) + "aws,us-east-1,a,H100,1024,80,192,2048,5,1\n").ok());
  // Comments and blank lines keep the line count honest.
  EXPECT_EQ(ErrorOf(std::string(kHeader) + "# my prices\n\naws,us-east-1,a,H100,8,80,192,2048,x,1\n"),
            "my.csv:4: column 'price_ondemand_hr': 'x' is not a number");
}

TEST(Catalog, MissingColumnAndUnknownGpu) {
  std::string err =
      ErrorOf("provider,region,instance_type,gpu,price_ondemand_hr,price_spot_hr\naws,r,a,H100,1,1\n");
  EXPECT_EQ(err.rfind("my.csv:1: missing column 'gpu_count'", 0), 0u) << err;
  err = ErrorOf(std::string(kHeader) + "aws,us-east-1,x,Z100,8,80,192,2048,10,5\n");
  EXPECT_EQ(err.rfind("my.csv:2: unknown GPU 'Z100' (known: H100, L4)", 0), 0u) << err;
  err = ErrorOf("name,price\nfoo,1\n");
  EXPECT_EQ(err.rfind("my.csv:1: not a catalog file", 0), 0u) << err;
  Result<Catalog> no_gpus = LoadCatalogFromTexts({{"my.csv", std::string(kHeader)}}, PlanDefaults());
  EXPECT_FALSE(no_gpus.ok());
}

TEST(Catalog, SuspiciousRowsWarnAndAreKept) {
  Result<Catalog> c = Load(std::string(kHeader) +
                           "gcp,us-central1,a3-highgpu-8g,H100,8,80,208,1872,43,50\n"  // spot > on-demand
                           "gcp,us-east4,a3-highgpu-4g,H100,8,80,208,1872,44,20\n"     // name says 4
                           "aws,us-east-1,p5.48xlarge,H100,8,80,192,2048,55,2\n"       // spot 4% of od
                           "lambda,any,gpu_1x_h100_pcie,H100,1,80,26,200,3.29,\n"      // PCIe name, SXM spec
                           "gcp,us-central1,n1-*+1xL4,L4,1,24,,,0.1,\n"                // GPU-only price
                           "x,r,l4a,L4,1,24,4,16,0.8,\n"
                           "x,r,l4b,L4,1,24,4,16,0.9,\n"
                           "x,r,l4c,L4,1,24,4,16,5.0,\n");  // 5.6x the L4 median
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_EQ(c->offers.size(), 8u);
  EXPECT_EQ(c->offers[0].spot_warnings.size(), 1u);
  EXPECT_NE(c->offers[0].spot_warnings[0].find(">= on-demand"), std::string::npos);
  EXPECT_NE(c->offers[1].warnings.at(0).find("name says 4 GPUs, gpu_count is 8"), std::string::npos);
  EXPECT_NE(c->offers[2].spot_warnings.at(0).find("4% of on-demand"), std::string::npos);
  EXPECT_NE(c->offers[3].warnings.at(0).find("PCIe instance"), std::string::npos);
  EXPECT_NE(c->offers[4].warnings.at(0).find("GPUs only"), std::string::npos);
  EXPECT_TRUE(c->offers[5].warnings.empty());
  ASSERT_FALSE(c->offers[7].warnings.empty());
  EXPECT_NE(c->offers[7].warnings.back().find("x the L4 median"), std::string::npos);
  // Every warning is also listed with its file:line.
  EXPECT_EQ(c->warnings.front().rfind("my.csv:2: gcp/us-central1/a3-highgpu-8g: ", 0), 0u)
      << c->warnings.front();
}

TEST(Catalog, UserGpuSpecOverridesShippedOne) {
  Result<Catalog> c = LoadCatalogFromTexts(
      {{"gpus.csv", kGpus},
       {"mine.csv", "gpu,mem_gib,bf16_fp16_tflops_dense,tf32_tflops_dense\nL4,24,100,50\n"}},
      PlanDefaults());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(*c->FindGpu("L4")->bf16_tflops, 100);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("overrides gpus.csv:3"), std::string::npos);
}

TEST(Catalog, ShippedCatalogLoads) {
  const char* src = std::getenv("TERN_SOURCE_DIR");
  std::filesystem::path root = src ? src : TERN_TEST_SOURCE_DIR;
  auto files = ShippedCatalogFiles((root / "data" / "catalog").string());
  ASSERT_EQ(files.size(), 3u);
  Result<Catalog> c = LoadCatalog(files, PlanDefaults());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->offers.size(), 254u);
  EXPECT_GE(c->gpus.size(), 17u);
  // The anomalies SOURCES.md describes are flagged, not used silently.
  EXPECT_FALSE(c->warnings.empty());
}

TEST(Catalog, FindCatalogDirHonoursTernDataDir) {
  setenv("TERN_DATA_DIR", "/nonexistent-tern", 1);
  Result<std::string> r = FindCatalogDir();
  unsetenv("TERN_DATA_DIR");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent-tern/catalog"), std::string::npos);
  // Without the override it finds the repository's data/catalog from the test binary's directory.
  Result<std::string> found = FindCatalogDir();
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_NE(found->find("data/catalog"), std::string::npos);
}

}  // namespace
}  // namespace tern::plan
