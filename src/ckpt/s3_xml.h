// The XML of S3's answers, parsed without an XML library (the few tags tern reads): the error body
// (<Error><Code>..</Code><Message>..</Message></Error>) and a ListObjectsV2 page. Pure functions, fuzzed
// (fuzz/README.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "ckpt/storage.h"

namespace tern::ckpt {

// The text between <tag> and </tag> from `*from` (0 without it); "" when absent. With `from`, *from is left
// at the closing tag (npos when <tag> is absent), so repeated calls walk the elements. A missing closing tag
// takes the rest of the text. XML entities (&amp; &lt; &gt; &quot; &apos;) are decoded.
std::string XmlValue(const std::string& xml, const std::string& tag, size_t* from = nullptr);

// One ListObjectsV2 page: the objects whose key starts with `full` (each key with its first `strip`
// characters removed), whether more pages follow, and the token for the next.
struct S3ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;
};
S3ListPage ParseS3ListPage(const std::string& body, const std::string& full, size_t strip);

}  // namespace tern::ckpt
