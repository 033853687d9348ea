// Helpers for the checkpoint tests that run real programs: free ports, child processes, shell commands,
// and a moto_server (S3 API) on loopback with SigV4 signature checking switched on.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tern::testing {

// A few hundred KB of varied English sentences, generated (the same text as the trainer test's).
std::string SmallCorpus();

// A prepared copy of SmallCorpus() (vocab 300, val fraction 0.1) shared by every test process of one ctest
// run (ctest runs each test case as a process; preparing once saves a tokenizer training per case). The
// first caller runs prepare(corpus_path, out_dir) under an flock; the others wait and reuse its output.
// Returns the data directory, or "" when preparing failed.
std::string SharedPreparedData(
    const std::function<bool(const std::string& corpus, const std::string& out)>& prepare);

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

struct CommandResult {
  int code = -1;       // exit status; -1 when killed by a signal
  std::string output;  // stdout and stderr
};
CommandResult RunCommand(const std::string& command);

// Absolute path of a program on PATH, or "".
std::string FindProgram(const std::string& name);

// A child process (argv, extra environment); killed (SIGTERM, then SIGKILL) and reaped on destruction.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
        const std::string& log_path = "/dev/null");
  ~Child();
  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; the exit code, or 128 + signal.
  int Wait();
  bool Running();

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// moto_server on a free port. Created with signature checking: the first 3 requests (IAM user, policy,
// access key, made with the aws CLI) pass without auth; from then on every request must be signed with the
// returned key, and a wrong secret gets 403 SignatureDoesNotMatch.
struct Moto {
  std::unique_ptr<Child> child;
  std::string endpoint, key_id, secret, aws;  // aws: the CLI path
  // Non-empty when the S3 tests cannot run here: what is missing (or did not start) and how to get it. The
  // tests skip with it, or fail with it when CI is set (testing/skip.h).
  std::string skip_reason;
  // "AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=us-east-1 aws --endpoint-url E"
  std::string AwsCli() const;
};
std::unique_ptr<Moto> StartMoto(const std::string& bucket);
// The message for a missing moto_server and/or aws CLI: which is missing and how to get it.
std::string MissingS3Tools(bool no_moto, bool no_aws);

}  // namespace tern::testing
