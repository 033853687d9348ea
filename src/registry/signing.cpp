#include "registry/signing.h"

#include "core/file_util.h"
#include "registry/digest.h"

namespace tern::registry {
namespace {

std::string Body(nlohmann::json manifest) {
  manifest.erase("signature");
  return manifest.dump();
}

}  // namespace

std::string KeyId(const std::string& key) {
  return Sha256Hex("tern-registry-key-id" + key).substr(0, 16);
}

void SignManifest(nlohmann::json* manifest, const std::string& key) {
  (*manifest)["signature"] = {
      {"alg", "HMAC-SHA256"}, {"key_id", KeyId(key)}, {"hmac", HmacSha256Hex(key, Body(*manifest))}};
}

Status VerifyManifest(const nlohmann::json& manifest, const std::string& key, bool must_be_signed,
                      const std::string& what) {
  const bool has = manifest.contains("signature") && manifest["signature"].is_object();
  if (!has) {
    if (must_be_signed)
      return Status::Corruption(what +
                                ": the index says this entry was signed but its manifest has no signature "
                                "(it was replaced or stripped); refusing it");
    return Status::Ok();
  }
  if (key.empty())
    return Status::InvalidArgument(what +
                                   " is signed (HMAC-SHA256); give the key with --key-file FILE (or "
                                   "$TERN_REGISTRY_KEY_FILE) to read it");
  const nlohmann::json& sig = manifest["signature"];
  if (sig.value("alg", "") != "HMAC-SHA256")
    return Status::Corruption(what + ": unknown signature algorithm '" + sig.value("alg", "") + "'");
  const std::string expected = HmacSha256Hex(key, Body(manifest));
  if (!ConstantTimeEquals(expected, sig.value("hmac", ""))) {
    if (sig.value("key_id", "") != KeyId(key))
      return Status::Corruption(what + ": signature check failed: it was signed with key " +
                                sig.value("key_id", "?") + ", and the key given is " + KeyId(key) +
                                " (wrong key file?)");
    return Status::Corruption(what +
                              ": signature check failed with the right key: the manifest was changed after "
                              "it was signed (tampered); refusing it");
  }
  return Status::Ok();
}

Result<std::string> ReadKeyFile(const std::string& path) {
  auto key = ReadFileToString(path);
  if (!key.ok()) return key.status().WithContext("reading the key file");
  std::string k = std::move(key).value();
  if (!k.empty() && k.back() == '\n') k.pop_back();
  if (k.empty()) return Status::InvalidArgument(path + ": the key file is empty");
  return k;
}

}  // namespace tern::registry
