#include "testing/processes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "net/http.h"

namespace tern::testing {

using net::HttpFetch;
using net::HttpRequest;
using net::UriEncode;

std::string SmallCorpus() {
  const char* subjects[] = {"The king",   "A shepherd",   "The river",
                            "My brother", "The old city", "A stranger"};
  const char* verbs[] = {"walked toward", "spoke softly to", "remembered", "looked upon", "built", "forgot"};
  const char* objects[] = {"the mountain.",  "the bright morning.", "his father's house.",
                           "the quiet sea.", "a field of wheat.",   "the last gate."};
  std::string out;
  uint64_t x = 12345;
  for (int i = 0; i < 6000; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out += std::string(subjects[(x >> 33) % 6]) + " " + verbs[(x >> 41) % 6] + " " + objects[(x >> 49) % 6];
    out += (i % 4 == 3) ? "\n" : " ";
  }
  return out;
}

std::string SharedPreparedData(const std::function<bool(const std::string&, const std::string&)>& prepare) {
  // Keyed by the parent process: one ctest invocation (or one shell running a test binary) shares one copy.
  // Copies whose parent is gone are removed, so they do not pile up in /tmp.
  const std::string prefix = "tern_ckpt_test_data_";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const pid_t owner = static_cast<pid_t>(std::atol(name.c_str() + prefix.size()));
    if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) std::filesystem::remove_all(e.path(), ec);
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + std::to_string(::getppid()));
  std::filesystem::create_directories(dir);
  const int lock = ::open((dir / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(lock, LOCK_EX);
  const std::string data = (dir / "data").string();
  bool ok = std::filesystem::exists(dir / "data" / "prepare.json");
  if (!ok) {
    std::ofstream(dir / "corpus.txt") << SmallCorpus();
    ok = prepare((dir / "corpus.txt").string(), data) &&
         std::filesystem::exists(dir / "data" / "prepare.json");
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return ok ? data : "";
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string FindProgram(const std::string& name) {
  CommandResult r = RunCommand("command -v " + name);
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) r.output.pop_back();
  return r.code == 0 ? r.output : "";
}

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
             const std::string& log_path) {
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);  // its own group, so a shell wrapper and its children can be signalled together
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    FILE* log = std::fopen(log_path.c_str(), "a");
    if (log) {
      ::dup2(fileno(log), 1);
      ::dup2(fileno(log), 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::_Exit(127);
  }
}

Child::~Child() {
  if (pid_ > 0 && Running()) {
    ::kill(-pid_, SIGTERM);
    for (int i = 0; i < 50 && Running(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (Running()) ::kill(-pid_, SIGKILL);
    Wait();
  }
}

void Child::Signal(int sig) {
  ::kill(pid_, sig);
}

bool Child::Running() {
  if (status_ != -1) return false;
  int st;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = st;
    return false;
  }
  return r == 0;
}

int Child::Wait() {
  if (status_ == -1) {
    int st;
    if (::waitpid(pid_, &st, 0) == pid_) status_ = st;
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::string Moto::AwsCli() const {
  return "AWS_ACCESS_KEY_ID=" + key_id + " AWS_SECRET_ACCESS_KEY=" + secret +
         " AWS_DEFAULT_REGION=us-east-1 " + aws + " --endpoint-url " + endpoint;
}

std::string MissingS3Tools(bool no_moto, bool no_aws) {
  std::string text = no_moto && no_aws ? "moto_server and the aws CLI are"
                     : no_moto         ? "moto_server is"
                                       : "the aws CLI is";
  text += " not on PATH (the S3 tests run moto_server and read back with the aws CLI).";
  if (no_moto) {
    text +=
        " moto_server: Debian has no package; `sudo apt-get install pipx && pipx install 'moto[server]'` "
        "(`pipx ensurepath` puts ~/.local/bin on PATH).";
  }
  if (no_aws) text += " aws: Debian's awscli, which scripts/install-deps installs.";
  return text + " scripts/install-deps checks for both.";
}

std::unique_ptr<Moto> StartMoto(const std::string& bucket) {
  auto m = std::make_unique<Moto>();
  const std::string moto = FindProgram("moto_server");
  m->aws = FindProgram("aws");
  if (moto.empty() || m->aws.empty()) {
    m->skip_reason = MissingS3Tools(moto.empty(), m->aws.empty());
    return m;
  }
  const int port = FreePort();
  m->endpoint = "http://127.0.0.1:" + std::to_string(port);
  m->child =
      std::make_unique<Child>(std::vector<std::string>{moto, "-H", "127.0.0.1", "-p", std::to_string(port)},
                              std::map<std::string, std::string>{{"INITIAL_NO_AUTH_ACTION_COUNT", "3"}},
                              "/tmp/tern_moto_" + std::to_string(port) + ".log");
  bool up = false;
  for (int i = 0; i < 300 && !up; i++) {  // up to 30 s on a loaded machine
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    HttpRequest probe;
    probe.url = m->endpoint + "/moto-api/";  // moto's dashboard: does not use up the no-auth budget
    probe.timeout_s = 2;
    auto r = HttpFetch(probe);
    up = r.ok() && r->status > 0;
    if (!m->child->Running()) break;
  }
  if (!up) {
    m->skip_reason = "moto_server did not start (see /tmp/tern_moto_" + std::to_string(port) + ".log)";
    return m;
  }
  // The three unauthenticated calls, made with our HTTP client (an aws CLI start costs seconds on a busy
  // machine): an IAM user, an allow-all policy, an access key.
  auto iam = [&](const std::string& form) {
    HttpRequest req;
    req.method = "POST";
    req.url = m->endpoint + "/";
    req.headers = {"Content-Type: application/x-www-form-urlencoded"};
    req.body = form;
    req.aws_sigv4 = "aws:amz:us-east-1:iam";
    req.userpwd = "test:test";
    auto r = HttpFetch(req);
    return r.ok() ? r->body : r.status().message();
  };
  const std::string policy =
      R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]})";
  iam("Action=CreateUser&UserName=ci&Version=2010-05-08");
  iam("Action=PutUserPolicy&UserName=ci&PolicyName=all&PolicyDocument=" + UriEncode(policy, false) +
      "&Version=2010-05-08");
  const std::string key = iam("Action=CreateAccessKey&UserName=ci&Version=2010-05-08");
  auto between = [&](const std::string& tag) {
    size_t a = key.find("<" + tag + ">"), b = key.find("</" + tag + ">");
    return a == std::string::npos || b == std::string::npos
               ? ""
               : key.substr(a + tag.size() + 2, b - a - tag.size() - 2);
  };
  m->key_id = between("AccessKeyId");
  m->secret = between("SecretAccessKey");
  if (m->key_id.empty() || m->secret.empty()) {
    m->skip_reason = "could not create an IAM key in moto: " + key;
    return m;
  }
  HttpRequest mb;  // CreateBucket, now signed with the new key
  mb.method = "PUT";
  mb.url = m->endpoint + "/" + bucket;
  mb.headers = {"x-amz-content-sha256: UNSIGNED-PAYLOAD"};
  mb.aws_sigv4 = "aws:amz:us-east-1:s3";
  mb.userpwd = m->key_id + ":" + m->secret;
  auto made = HttpFetch(mb);
  if (!made.ok() || made->status != 200)
    m->skip_reason =
        "CreateBucket failed against moto: " + (made.ok() ? made->body : made.status().message());
  return m;
}

}  // namespace tern::testing
