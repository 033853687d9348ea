// S3's XML answers (ckpt/s3_xml.h): an error body (Code, Message: what a failed request reports), a multipart
// upload's UploadId, and a ListObjectsV2 page (Contents/Key/Size, IsTruncated, NextContinuationToken), listed
// without and with a key prefix.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ckpt/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (const char* tag : {"Code", "Message", "UploadId"}) (void)tern::ckpt::XmlValue(body, tag);
  for (const auto& [full, strip] : {std::pair<std::string, size_t>{"", 0}, {"runs/a/", 7}}) {
    tern::ckpt::S3ListPage page = tern::ckpt::ParseS3ListPage(body, full, strip);
    if (page.objects.size() > size) __builtin_trap();
  }
  return 0;
}
