#include "dist/bootstrap_file.h"

#include <fstream>

#include <fmt/format.h>

#include "core/file_util.h"
#include "dist/poll.h"

namespace tern::dist {
namespace {

// The file: three lines, "tern-bootstrap 1", "tag <tag>", "secret <hex>".
constexpr std::string_view kMagic = "tern-bootstrap 1";

std::string Hex(std::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

bool Unhex(std::string_view hex, std::string* out) {
  if (hex.size() % 2) return false;
  out->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    for (char c : hex.substr(i, 2)) {
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else
        return false;
    }
    out->push_back(static_cast<char>(v));
  }
  return true;
}

// What the file at `path` says: false when it is absent or not (yet) a whole bootstrap file.
bool Parse(const std::string& path, std::string* tag, std::string* secret) {
  std::ifstream in(path);
  std::string magic, tag_line, secret_line;
  if (!std::getline(in, magic) || magic != kMagic || !std::getline(in, tag_line) ||
      !std::getline(in, secret_line))
    return false;
  if (tag_line.rfind("tag ", 0) != 0 || secret_line.rfind("secret ", 0) != 0) return false;
  *tag = tag_line.substr(4);
  return Unhex(std::string_view(secret_line).substr(7), secret);
}

}  // namespace

Status PublishBootstrapFile(const std::string& path, const std::string& tag, std::string_view secret) {
  if (tag.find('\n') != std::string::npos)
    return Status::InvalidArgument("a bootstrap tag may not hold a newline");
  Status s = WriteFileAtomic(path, fmt::format("{}\ntag {}\nsecret {}\n", kMagic, tag, Hex(secret)));
  return s.WithContext("publishing the NCCL id for the other ranks (dist.nccl_id_file)");
}

Result<std::string> ReadBootstrapFile(const std::string& path, const std::string& tag, size_t size,
                                      std::chrono::milliseconds timeout) {
  PollClock clock(timeout);
  std::string seen_tag, secret;
  bool seen = false;
  for (;;) {
    if (Parse(path, &seen_tag, &secret)) {
      seen = true;
      if ((tag.empty() || seen_tag == tag) && secret.size() == size) return secret;
    }
    if (clock.Expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string why = "rank 0 did not start, or the path is not on a filesystem every rank shares";
  if (seen && !tag.empty() && seen_tag != tag)
    why = fmt::format("the file there is from another launch (tag '{}', this one is '{}')", seen_tag, tag);
  else if (seen)
    why = fmt::format("the file there holds {} bytes, not the {} expected (another program's file?)",
                      secret.size(), size);
  return Status::Unavailable(fmt::format("no NCCL id for this launch appeared at {} within {:g} s: {}", path,
                                         timeout.count() / 1000.0, why));
}

}  // namespace tern::dist
