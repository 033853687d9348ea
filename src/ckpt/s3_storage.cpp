#include "ckpt/s3_storage.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "ckpt/s3_xml.h"
#include "net/http.h"

namespace tern::ckpt {

using net::HttpFetch;
using net::HttpRequest;
using net::UriEncode;

namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// [section] key = value files (~/.aws/credentials, ~/.aws/config): the values of one section.
std::map<std::string, std::string> IniSection(const std::string& path, const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line, current;
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t\r"));
    s.erase(s.find_last_not_of(" \t\r") + 1);
    return s;
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      current = trim(line.substr(1, line.size() - 2));
      if (current.starts_with("profile ")) current = trim(current.substr(8));  // ~/.aws/config spelling
      continue;
    }
    auto eq = line.find('=');
    if (current == section && eq != std::string::npos)
      out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return out;
}

std::string Mask(const std::string& key_id) {
  return key_id.size() > 4 ? "..." + key_id.substr(key_id.size() - 4) : "(short key id)";
}

}  // namespace

struct S3Storage::Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
};

Result<AwsCredentials> LoadAwsCredentials(const S3Options& o) {
  AwsCredentials c;
  const std::string home = Env("HOME");
  const std::string profile = !Env("AWS_PROFILE").empty() ? Env("AWS_PROFILE")
                              : !o.profile.empty()        ? o.profile
                                                          : "default";
  const std::string cred_file = !Env("AWS_SHARED_CREDENTIALS_FILE").empty()
                                    ? Env("AWS_SHARED_CREDENTIALS_FILE")
                                    : home + "/.aws/credentials";
  const std::string config_file =
      !Env("AWS_CONFIG_FILE").empty() ? Env("AWS_CONFIG_FILE") : home + "/.aws/config";
  if (!Env("AWS_ACCESS_KEY_ID").empty() && !Env("AWS_SECRET_ACCESS_KEY").empty()) {
    c.access_key_id = Env("AWS_ACCESS_KEY_ID");
    c.secret_access_key = Env("AWS_SECRET_ACCESS_KEY");
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.source = "environment (AWS_ACCESS_KEY_ID)";
  } else {
    auto sec = IniSection(cred_file, profile);
    c.access_key_id = sec["aws_access_key_id"];
    c.secret_access_key = sec["aws_secret_access_key"];
    c.session_token = sec["aws_session_token"];
    c.region = sec["region"];
    c.source = fmt::format("profile '{}' in {}", profile, cred_file);
    if (c.access_key_id.empty() || c.secret_access_key.empty()) {
      return Status::NotFound(fmt::format(
          "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add aws_access_key_id and "
          "aws_secret_access_key to profile '{}' in {}",
          profile, cred_file));
    }
  }
  for (const std::string& r : {o.region, Env("AWS_REGION"), Env("AWS_DEFAULT_REGION"), c.region,
                               IniSection(config_file, profile)["region"], std::string("us-east-1")}) {
    if (!r.empty()) {
      c.region = r;
      break;
    }
  }
  return c;
}

Result<std::unique_ptr<S3Storage>> S3Storage::Open(const std::string& uri, const S3Options& options) {
  if (!IsS3Uri(uri))
    return Status::InvalidArgument(fmt::format("'{}' is not an s3://bucket/prefix URI", uri));
  std::unique_ptr<S3Storage> s(new S3Storage());
  s->opt_ = options;
  std::string rest = uri.substr(5);
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t slash = rest.find('/');
  s->bucket_ = rest.substr(0, slash);
  s->prefix_ = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (s->bucket_.empty()) return Status::InvalidArgument(fmt::format("'{}' names no bucket", uri));
  TERN_ASSIGN_OR_RETURN(s->cred_, LoadAwsCredentials(options));
  s->endpoint_ = !options.endpoint.empty()             ? options.endpoint
                 : !Env("AWS_ENDPOINT_URL_S3").empty() ? Env("AWS_ENDPOINT_URL_S3")
                 : !Env("AWS_ENDPOINT_URL").empty()    ? Env("AWS_ENDPOINT_URL")
                                                       : "https://s3." + s->cred_.region + ".amazonaws.com";
  while (!s->endpoint_.empty() && s->endpoint_.back() == '/') s->endpoint_.pop_back();
  if (s->opt_.part_size < (5u << 20)) s->opt_.part_size = 5u << 20;
  return s;
}

std::string S3Storage::uri() const {
  return "s3://" + JoinKey(bucket_, prefix_);
}

std::string S3Storage::ObjectPath(const std::string& key) const {
  return "/" + bucket_ + "/" + UriEncode(JoinKey(prefix_, key), /*keep_slash=*/true);
}

Result<S3Storage::Response> S3Storage::Call(const std::string& method, const std::string& key,
                                            const std::string& query, std::string_view body,
                                            const std::vector<std::string>& headers) {
  HttpRequest req;
  req.method = method;
  req.url = endpoint_ + (key.empty() ? "/" + bucket_ : ObjectPath(key)) + (query.empty() ? "" : "?" + query);
  req.headers = headers;
  req.headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");  // libcurl 7.88 does not add it
  if (!cred_.session_token.empty()) req.headers.push_back("x-amz-security-token: " + cred_.session_token);
  req.body = body;
  req.timeout_s = opt_.timeout_s;
  req.connect_timeout_s = opt_.connect_timeout_s;
  req.aws_sigv4 = "aws:amz:" + cred_.region + ":s3";
  req.userpwd = cred_.access_key_id + ":" + cred_.secret_access_key;
  const std::string what = fmt::format("S3 {} s3://{}/{}", method, bucket_, JoinKey(prefix_, key));
  std::mt19937_64 jitter(std::random_device{}());
  std::string last_error;
  for (int attempt = 1; attempt <= std::max(1, opt_.max_attempts); attempt++) {
    if (attempt > 1) {
      // Exponential backoff with jitter, so many ranks retrying at once do not stampede the store.
      double delay = std::min(10.0, opt_.backoff_s * std::pow(2.0, attempt - 2));
      delay *= 0.5 + 0.5 * std::uniform_real_distribution<double>(0, 1)(jitter);
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    }
    auto r = HttpFetch(req);
    if (!r.ok()) {
      last_error = r.status().message();
      continue;
    }
    if (r->status >= 500 || r->status == 429) {
      last_error = fmt::format("HTTP {} {}", r->status, XmlValue(r->body, "Code"));
      continue;
    }
    if (r->status >= 400 && r->status != 404) {
      std::string code = XmlValue(r->body, "Code"), msg = XmlValue(r->body, "Message");
      std::string hint;
      if (r->status == 403) {
        hint = fmt::format(
            " (credentials from {}, key id {}: check the secret key, the region '{}' and the "
            "clock)",
            cred_.source, Mask(cred_.access_key_id), cred_.region);
      }
      const std::string detail =
          code.empty() ? "(a " + method + " reply carries no error details)" : code + ": " + msg;
      return Status::IoError(fmt::format("{}: HTTP {} {}{}", what, r->status, detail, hint));
    }
    return Response{r->status, std::move(r->body), std::move(r->headers)};
  }
  return Status::Unavailable(fmt::format("{}: gave up after {} attempts, last: {}", what,
                                         std::max(1, opt_.max_attempts), last_error));
}

Status S3Storage::Put(const std::string& key, std::string_view data) {
  if (data.size() >= opt_.multipart_threshold && data.size() > opt_.part_size) return PutMultipart(key, data);
  TERN_ASSIGN_OR_RETURN(Response r, Call("PUT", key, "", data));
  if (r.status != 200) return Status::IoError(fmt::format("S3 PUT {}: unexpected HTTP {}", key, r.status));
  return Status::Ok();
}

Status S3Storage::PutMultipart(const std::string& key, std::string_view data) {
  TERN_ASSIGN_OR_RETURN(Response created, Call("POST", key, "uploads=", ""));
  const std::string upload_id = XmlValue(created.body, "UploadId");
  if (upload_id.empty())
    return Status::IoError(fmt::format("S3 multipart upload of {}: no UploadId in reply", key));
  const std::string id_q = "uploadId=" + UriEncode(upload_id, false);
  std::string complete = "<CompleteMultipartUpload>";
  Status st;
  int part = 0;
  for (size_t off = 0; off < data.size() && st.ok(); off += opt_.part_size) {
    part++;
    auto r = Call("PUT", key, fmt::format("partNumber={}&{}", part, id_q), data.substr(off, opt_.part_size));
    if (!r.ok()) {
      st = r.status();
      break;
    }
    complete +=
        fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", part, r->headers["etag"]);
  }
  complete += "</CompleteMultipartUpload>";
  if (st.ok()) st = CompleteMultipart(key, id_q, complete, data.size());
  if (!st.ok()) Call("DELETE", key, id_q, "").status().ok();  // abort, so the parts stop costing money
  return st;
}

Status S3Storage::CompleteMultipart(const std::string& key, const std::string& id_q, const std::string& body,
                                    uint64_t bytes) {
  const int attempts = std::max(1, opt_.max_attempts);
  std::string last;
  for (int attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1)
      std::this_thread::sleep_for(std::chrono::duration<double>(opt_.backoff_s * std::pow(2.0, attempt - 2)));
    auto r = Call("POST", key, id_q, body);
    if (!r.ok()) return r.status();  // Call already retried 5xx and transport errors
    // CompleteMultipartUpload can answer 200 with an <Error> body (AWS: retry it). NoSuchUpload means a
    // previous attempt completed the upload and only its answer was lost (Call retried a reset connection):
    // the object is there when it has the expected size (the manifest's checksum checks the rest).
    const std::string& reply = r->body;
    if (r->status == 200 && reply.find("<Error>") == std::string::npos) return Status::Ok();
    const std::string code = XmlValue(reply, "Code");
    if (code == "NoSuchUpload" || r->status == 404) {
      auto head = Call("HEAD", key, "", "");
      if (head.ok() && head->status == 200 &&
          std::strtoull(head->headers["content-length"].c_str(), nullptr, 10) == bytes)
        return Status::Ok();
      return Status::IoError(fmt::format(
          "S3 complete multipart s3://{}/{}: the upload is gone (NoSuchUpload) and the object is not there "
          "with its {} bytes; the save fails and the previous checkpoint stays",
          bucket_, JoinKey(prefix_, key), bytes));
    }
    last = code + ": " + XmlValue(reply, "Message");
    if (code != "InternalError" && code != "SlowDown" && code != "ServiceUnavailable") break;
  }
  return Status::IoError(
      fmt::format("S3 complete multipart s3://{}/{}: {}", bucket_, JoinKey(prefix_, key), last));
}

Result<std::string> S3Storage::Get(const std::string& key) {
  TERN_ASSIGN_OR_RETURN(Response r, Call("GET", key, "", ""));
  if (r.status == 404)
    return Status::NotFound(fmt::format("s3://{}/{} does not exist", bucket_, JoinKey(prefix_, key)));
  return std::move(r.body);
}

Result<std::vector<ObjectInfo>> S3Storage::List(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  const std::string full = prefix_.empty() ? prefix : prefix_ + "/" + prefix;
  const size_t strip = prefix_.empty() ? 0 : prefix_.size() + 1;
  std::string token;
  std::set<std::string> seen_tokens;
  while (true) {
    // Some servers (moto_server: werkzeug decodes %2F in the query before checking the signature) reject a
    // correctly signed prefix that contains '/'. Then ask for the part before the first '/', which needs no
    // escaping, and filter here: more keys on the wire, same answer.
    const std::string server_prefix = slashless_list_ ? full.substr(0, full.find('/')) : full;
    // Parameters sorted by name: this string is also what SigV4 signs.
    std::string q = token.empty() ? "" : "continuation-token=" + UriEncode(token, false) + "&";
    q += "list-type=2&prefix=" + UriEncode(server_prefix, false);
    auto called = Call("GET", "", q, "");
    if (!called.ok() && !slashless_list_ && server_prefix.find('/') != std::string::npos &&
        called.status().message().find("SignatureDoesNotMatch") != std::string::npos) {
      slashless_list_ = true;
      out.clear();
      token.clear();
      seen_tokens.clear();
      continue;
    }
    TERN_ASSIGN_OR_RETURN(Response r, std::move(called));
    if (r.status == 404) return Status::NotFound(fmt::format("S3 bucket '{}' does not exist", bucket_));
    S3ListPage page = ParseS3ListPage(r.body, full, strip);
    for (auto& o : page.objects) out.push_back(std::move(o));
    if (!page.truncated) break;
    token = std::move(page.next_token);
    if (token.empty()) break;
    // A server that hands back a token it gave before would be listed forever (and the keys counted twice).
    if (!seen_tokens.insert(token).second) {
      return Status::Unavailable(fmt::format(
          "listing s3://{}/{}: the server returned continuation token '{}' twice after {} pages; it is "
          "looping (a proxy caching the list call, or a server bug): nothing was changed, retry or list "
          "through another endpoint",
          bucket_, full, token.substr(0, 64), seen_tokens.size()));
    }
  }
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status S3Storage::Delete(const std::string& key) {
  TERN_ASSIGN_OR_RETURN(Response r, Call("DELETE", key, "", ""));
  (void)r;  // 204, or 404 for a missing key: both mean "gone"
  return Status::Ok();
}

Result<bool> S3Storage::Exists(const std::string& key) {
  TERN_ASSIGN_OR_RETURN(Response r, Call("HEAD", key, "", ""));
  return r.status == 200;
}

}  // namespace tern::ckpt
