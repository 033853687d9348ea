// S3-compatible object storage (AWS S3, GCS interoperability, R2, MinIO, moto) over libcurl, signed with
// libcurl's SigV4 (CURLOPT_AWS_SIGV4). Path-style URLs (ENDPOINT/BUCKET/KEY) so any endpoint works without
// DNS tricks. Objects at least S3Options::multipart_threshold upload in parts. Every request is retried
// with exponential backoff on 5xx, 429 and transport errors. Secrets never appear in messages or logs.
#pragma once

#include "ckpt/storage.h"

namespace tern::ckpt {

struct AwsCredentials {
  std::string access_key_id, secret_access_key, session_token, region;
  std::string source;  // "environment" or "profile NAME in PATH", for messages
};

// $AWS_ACCESS_KEY_ID / $AWS_SECRET_ACCESS_KEY / $AWS_SESSION_TOKEN, else the profile ($AWS_PROFILE or
// options.profile or "default") in $AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials. Region:
// options.region, $AWS_REGION, $AWS_DEFAULT_REGION, the profile's `region`, "us-east-1".
Result<AwsCredentials> LoadAwsCredentials(const S3Options& options);

class S3Storage : public Storage {
 public:
  // uri: "s3://bucket" or "s3://bucket/prefix".
  static Result<std::unique_ptr<S3Storage>> Open(const std::string& uri, const S3Options& options);

  std::string uri() const override;
  Status Put(const std::string& key, std::string_view data) override;
  Status SyncDir(const std::string&) override { return Status::Ok(); }  // a 200 PUT is durable
  Result<std::string> Get(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  Result<bool> Exists(const std::string& key) override;

  const std::string& endpoint() const { return endpoint_; }

 private:
  S3Storage() = default;
  struct Response;
  // One signed request with retries. `query` must already be canonical (sorted, encoded), because
  // libcurl 7.88 signs the query string as given.
  Result<Response> Call(const std::string& method, const std::string& key, const std::string& query,
                        std::string_view body, const std::vector<std::string>& headers = {});
  Status PutMultipart(const std::string& key, std::string_view data);
  // CompleteMultipartUpload, retried on a 200 with a retryable <Error>; a NoSuchUpload after a lost answer
  // is success when the object is there with `bytes` bytes.
  Status CompleteMultipart(const std::string& key, const std::string& id_q, const std::string& body,
                           uint64_t bytes);
  std::string ObjectPath(const std::string& key) const;

  S3Options opt_;
  AwsCredentials cred_;
  std::string endpoint_, bucket_, prefix_;
  bool slashless_list_ = false;  // see List()
};

}  // namespace tern::ckpt
