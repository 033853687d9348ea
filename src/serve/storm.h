// A storm against `tern serve`: many clients at once sending a mix of well-formed OpenAI requests
// (completions and chat, streaming and not, long prompts, slow readers) and hostile ones (clients that
// vanish mid-stream or mid-request, malformed and oversized bodies, truncated bodies, bytes that are not
// HTTP), each on its own loopback connection written byte by byte (raw sockets: a library client cannot
// misbehave on purpose). It checks the server's side of the contract: every well-formed request answered
// with 200 or the documented back-pressure (429, 503), malformed ones with 400/413, and no other 5xx.
// Used by the fast test (server_storm_test.cpp) and the benchmark (bench/serve_storm.cpp).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace tern {

struct StormOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int requests = 200;
  int concurrency = 64;
  int max_tokens = 16;           // per well-formed request
  int long_prompt_tokens = 100;  // the long prompts (must fit the served context with max_tokens)
  int vocab = 259;               // prompt token ids are drawn from [3, vocab)
  size_t oversized_bytes = 2u << 20;
  double slow_read_s = 0.3;  // a slow reader spreads its stream over about this long
  double io_timeout_s = 60;  // a client gives up on a silent server after this long
};

// The request kinds, in the order a storm cycles through them.
enum class StormKind {
  kCompletion,
  kCompletionStream,
  kChat,
  kChatStream,
  kLongPrompt,
  kSlowReader,     // a stream read a few bytes at a time
  kVanishStream,   // reads the first event, then closes
  kVanishRequest,  // sends the request, closes before any answer
  kMalformed,      // broken JSON or a field of the wrong type: 400
  kOversized,      // a Content-Length over the server's limit: 413
  kTruncatedBody,  // promises more body than it sends, then closes its side
  kGarbage,        // not HTTP
  kCount
};
const char* StormKindName(StormKind k);
bool WellFormed(StormKind k);  // must be answered with 200, 429 or 503

struct StormReport {
  int requests = 0, concurrency = 0;
  double seconds = 0;
  std::map<std::string, std::map<int, int>> status;  // kind -> HTTP status -> count (0: no answer)
  std::map<std::string, double> max_seconds;         // kind -> the slowest one
  int well_formed = 0, ok = 0, backpressure = 0;     // well-formed requests; answered 200; 429/503
  int unanswered = 0;                                // well-formed requests without an answer
  int server_errors = 0;                             // 5xx other than 503, any request
  int wrong_status = 0;  // malformed not 400, oversized not 413, a 200 that is not a complete response
  std::vector<std::string> problems;  // the first few, described

  bool Ok() const { return unanswered == 0 && server_errors == 0 && wrong_status == 0; }
  std::string Summary() const;  // one paragraph: counts per kind and status, problems
};

StormReport RunStorm(const StormOptions& o);

// GET /metrics: every sample by its full name with labels ("tern_http_requests_total{...}") -> value. Empty
// when the server does not answer.
std::map<std::string, double> ScrapeMetrics(const StormOptions& o);
// The sum of tern_http_requests_total per status code.
std::map<int, double> RequestsByCode(const std::map<std::string, double>& metrics);
// VmRSS of a process in KiB (/proc/PID/status); -1 when unknown.
long ProcessRssKb(pid_t pid);

}  // namespace tern
