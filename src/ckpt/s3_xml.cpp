#include "ckpt/s3_xml.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace tern::ckpt {

// The text between <tag> and </tag> from `from`; npos-safe. XML entities are decoded.
std::string XmlValue(const std::string& xml, const std::string& tag, size_t* from) {
  size_t start = xml.find("<" + tag + ">", from ? *from : 0);
  if (start == std::string::npos) {
    if (from) *from = std::string::npos;
    return "";
  }
  start += tag.size() + 2;
  size_t end = xml.find("</" + tag + ">", start);
  if (end == std::string::npos) end = xml.size();
  if (from) *from = end;
  std::string v = xml.substr(start, end - start), out;
  for (size_t i = 0; i < v.size(); i++) {
    if (v[i] != '&') {
      out += v[i];
      continue;
    }
    static const std::pair<const char*, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool matched = false;
    for (const auto& [ent, ch] : kEntities) {
      if (v.compare(i, std::strlen(ent), ent) == 0) {
        out += ch;
        i += std::strlen(ent) - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += '&';
  }
  return out;
}

S3ListPage ParseS3ListPage(const std::string& body, const std::string& full, size_t strip) {
  S3ListPage page;
  size_t pos = 0;
  while (true) {
    std::string item = XmlValue(body, "Contents", &pos);
    if (pos == std::string::npos) break;
    std::string k = XmlValue(item, "Key");
    const std::string size = XmlValue(item, "Size");
    if (k.starts_with(full))
      page.objects.push_back({k.substr(strip), std::strtoull(size.c_str(), nullptr, 10)});
  }
  page.truncated = XmlValue(body, "IsTruncated") == "true";
  page.next_token = XmlValue(body, "NextContinuationToken");
  return page;
}

}  // namespace tern::ckpt
