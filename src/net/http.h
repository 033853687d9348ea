// A small blocking HTTP client on libcurl, shared by the S3 store and the preemption-notice poller.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::net {

struct HttpRequest {
  std::string method = "GET";  // GET PUT POST DELETE HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string_view body;             // sent for PUT and POST
  double timeout_s = 30;
  double connect_timeout_s = 10;
  // SigV4 signing by libcurl: provider "aws:amz:REGION:s3" and "KEYID:SECRET". Empty = unsigned.
  std::string aws_sigv4, userpwd;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lowercased
};

// Unavailable on transport failures (connection refused, timeout, reset), with curl's reason; any HTTP
// status, including 4xx and 5xx, is a response.
Result<HttpResponse> HttpFetch(const HttpRequest& req);

// RFC 3986 percent-encoding of everything but unreserved characters (and '/' when keep_slash).
std::string UriEncode(std::string_view s, bool keep_slash);

}  // namespace tern::net
