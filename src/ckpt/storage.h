// Where checkpoints live, behind one small interface (leveldb's Env idea): a local directory, an
// S3-compatible object store, and test doubles (memory, fault injection) all look the same to the
// checkpoint writer, the loader and garbage collection.
//
// Keys are relative, '/'-separated paths ("step_00000100/manifest.json"). The publish protocol a
// checkpoint relies on, per backend:
//   Put(key)     the object appears whole or not at all (local: temp file + fsync + rename;
//                S3: one PUT or a completed multipart upload). Never half an object under `key`.
//   SyncDir(d)   every Put and Delete under the directory `d` survives a crash from now on (local:
//                fsync of the directory and its parents up to the root; S3: nothing to do, a PUT that
//                returned 200 is durable).
// A checkpoint writer therefore Puts its data files, SyncDir()s, Puts the manifest, SyncDir()s again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::ckpt {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

class Storage {
 public:
  virtual ~Storage() = default;
  // Where this storage points, for messages: "/abs/dir" or "s3://bucket/prefix". Never holds secrets.
  virtual std::string uri() const = 0;
  // True for local disks (resume prefers them on a tie: faster to read).
  virtual bool is_local() const { return false; }

  virtual Status Put(const std::string& key, std::string_view data) = 0;
  virtual Status SyncDir(const std::string& dir) = 0;
  // NotFound when the key does not exist.
  virtual Result<std::string> Get(const std::string& key) = 0;
  // Every object whose key starts with `prefix`, sorted by key.
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
  // Ok when the key did not exist.
  virtual Status Delete(const std::string& key) = 0;
  virtual Result<bool> Exists(const std::string& key) = 0;
};

// Settings of S3-compatible stores that the URI does not carry.
struct S3Options {
  std::string endpoint;  // "http://127.0.0.1:9000"; empty = $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, AWS
  std::string region;    // empty = $AWS_REGION, $AWS_DEFAULT_REGION, the profile's, "us-east-1"
  std::string profile;   // ~/.aws/credentials profile; empty = $AWS_PROFILE or "default"
  uint64_t multipart_threshold = 64ull << 20;  // objects at least this large upload in parts
  uint64_t part_size = 64ull << 20;            // >= 5 MiB (S3's minimum for all but the last part)
  int max_attempts = 5;    // per request, on 5xx, 429 and transport errors (timeouts, resets)
  double backoff_s = 0.2;  // first retry delay; doubles each time, capped at 10 s, with jitter
  double timeout_s = 300;  // per request
  double connect_timeout_s = 10;
};

// "s3://bucket/prefix" -> S3Storage; anything else is a local directory (created when missing).
Result<std::unique_ptr<Storage>> OpenStorage(const std::string& uri, const S3Options& s3 = {});
bool IsS3Uri(const std::string& uri);

// "a/b" + "c" -> "a/b/c"; either side may be empty.
std::string JoinKey(const std::string& a, const std::string& b);

}  // namespace tern::ckpt
