// SHA-256 and HMAC-SHA256 (OpenSSL libcrypto) for the registry: blobs are named by their SHA-256, and a
// signed manifest carries an HMAC-SHA256 of its body under the user's key.
#pragma once

#include <string>
#include <string_view>

namespace tern::registry {

std::string Sha256Hex(std::string_view data);  // 64 lowercase hex digits
std::string HmacSha256Hex(std::string_view key, std::string_view data);
// Compares two strings in time that depends only on their lengths (signatures, key ids).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tern::registry
