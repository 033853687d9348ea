// The model registry: NAME version N, content-addressed weights, aliases with their history, optional
// HMAC-SHA256 signatures (docs/registry.md has the guarantees).
//
// The store (a directory or s3:// prefix, behind ckpt::Storage):
//   blobs/sha256/<hex>                    the weights and tokenizers, named by their SHA-256 (stored once)
//   models/<NAME>/v<N>/manifest.json      what version N is (files, config, data, run, metrics, parent)
//   index.sqlite                          s3 only: the index's published copy (a local store keeps it in
//   place)
// The index (index.h) decides what is visible: Register publishes the blobs, then the manifest, then commits
// the version's row; any failure before the commit leaves no version.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/storage.h"
#include "registry/index.h"
#include "registry/source.h"

namespace tern::registry {

// NAME, NAME@3, NAME@production (the part after "models:/" too).
struct ModelRef {
  std::string name;
  std::optional<int> version;  // NAME@3
  std::string alias;           // NAME@production; neither = the latest version
  std::string ToString() const;
};
Result<ModelRef> ParseModelRef(const std::string& text);

struct RegisterOptions {
  std::string name, alias, note;
  std::string parent;  // "NAME@V" (any ref), "" = none
};

struct Entry {
  std::string name;
  int version = 0;
  nlohmann::json manifest;  // verified: hash against the index, signature when signed
  bool signed_entry = false;
};

struct RegistryOptions {
  std::string location;   // directory or s3://bucket/prefix
  std::string key;        // HMAC key ("" = none: signed entries are refused on read)
  std::string cache_dir;  // s3: where the index and resolved models are kept ("" = $TERN_HOME/registry-cache)
  ckpt::S3Options s3;
  std::function<double()> now;  // UTC seconds (tests fake the clock); empty = the system clock
};

class Registry {
 public:
  static Result<std::unique_ptr<Registry>> Open(const RegistryOptions& o);
  // Tests: any Storage (fault injection), the index at `index_path`.
  static Result<std::unique_ptr<Registry>> Open(std::unique_ptr<ckpt::Storage> store,
                                                const std::string& index_path, const RegistryOptions& o);

  Result<Entry> Register(const ModelSource& source, const RegisterOptions& o);
  Result<Entry> Get(const ModelRef& ref);                         // verified manifest
  Result<std::vector<Entry>> List(const std::string& name = "");  // index rows (not re-verified)
  Status SetAlias(const std::string& name, int version, const std::string& alias);
  Result<std::vector<AliasMove>> Aliases(const std::string& name = "");
  Result<std::vector<AliasMove>> History(const std::string& name);
  // The aliases as they were at `at_unix`: the last move at or before it, per alias.
  Result<std::vector<AliasMove>> AliasesAt(const std::string& name, double at_unix);
  // A local directory with model.safetensors and tokenizer.model (each verified against its SHA-256) that
  // LoadModelWeights reads: <cache>/resolved/<NAME>-v<N>/<NAME>.
  Result<std::string> Materialize(const ModelRef& ref);
  // Blob bytes, verified against their hash.
  Result<std::string> ReadBlob(const std::string& sha256);

  ckpt::Storage& store() { return *store_; }
  static std::string BlobKey(const std::string& sha256);
  static std::string ManifestKey(const std::string& name, int version);

 private:
  Registry() = default;
  Result<int> ResolveVersion(const ModelRef& ref);
  Status PutBlob(const std::string& bytes, const std::string& sha256);
  Status PublishIndex();  // s3: uploads the index after a change
  double Now() const;
  std::unique_ptr<ckpt::Storage> store_;
  std::unique_ptr<Index> index_;
  std::string index_path_, resolved_dir_, key_;
  bool publish_index_ = false;
  std::function<double()> now_;
};

// $TERN_HOME/registry (default ~/.tern/registry); $TERN_REGISTRY overrides it.
std::string DefaultRegistryLocation();
// What every command opens: `location` ("" = DefaultRegistryLocation()), the HMAC key read from `key_file`
// ("" = $TERN_REGISTRY_KEY_FILE, unset = no key); errors name the registry.
Result<std::unique_ptr<Registry>> OpenRegistry(const std::string& location, const std::string& key_file);
// UTC: "2026-12-02T00:40:12.345Z" <-> seconds. Parse accepts "YYYY-MM-DD[THH:MM[:SS[.fff]]][Z]".
std::string FormatUtc(double unix_s);
Result<double> ParseUtc(const std::string& text);

}  // namespace tern::registry
