// Manifest signatures: "signature": {"alg": "HMAC-SHA256", "key_id", "hmac"} over the manifest without its
// "signature" field, serialised with sorted keys (nlohmann::json's dump), so any change to any field breaks
// it. key_id (the first 16 hex digits of SHA-256("tern-registry-key-id" + key)) names the key in errors
// without revealing it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern::registry {

std::string KeyId(const std::string& key);
void SignManifest(nlohmann::json* manifest, const std::string& key);
// Ok for an unsigned manifest when `must_be_signed` is false. `what` names the entry in errors.
Status VerifyManifest(const nlohmann::json& manifest, const std::string& key, bool must_be_signed,
                      const std::string& what);
// The key file's bytes, with one trailing newline dropped; refuses an empty file.
Result<std::string> ReadKeyFile(const std::string& path);

}  // namespace tern::registry
