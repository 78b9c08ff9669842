#include "aws/aws_testing.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>

#include "aws/aws_http.h"
#include "core/file_io.h"
#include "core/net.h"
#include "core/number_text.h"
#include "core/process.h"
#include "core/temp_dir.h"

namespace spot::aws {
namespace {

namespace fs = std::filesystem;

// Waits for the server, then (with auth) makes a user with full access and
// prints its key pair. Exactly three IAM requests: the server's
// INITIAL_NO_AUTH_ACTION_COUNT lets those through unsigned.
constexpr std::string_view kSetup = R"py(
import json, sys, time, urllib.request
endpoint, auth, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
deadline = time.time() + 60
while True:
    try:
        urllib.request.urlopen(endpoint + "/moto-api/", timeout=5).read()
        break
    except Exception as e:
        if time.time() > deadline:
            sys.exit("moto did not answer at %s: %s" % (endpoint, e))
        time.sleep(0.1)
key = {"AccessKeyId": "spot-test-key", "SecretAccessKey": "spot-test-secret"}
if auth:
    import boto3
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                       aws_access_key_id="setup", aws_secret_access_key="setup")
    iam.create_user(UserName="spot")
    key = iam.create_access_key(UserName="spot")["AccessKey"]
    iam.put_user_policy(UserName="spot", PolicyName="all", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
with open(out, "w") as f:
    f.write(key["AccessKeyId"] + "\n" + key["SecretAccessKey"] + "\n")
)py";

}  // namespace

fs::path VenvDir(const fs::path& source_dir) {
  const char* env = std::getenv("SPOT_VENV");
  return env != nullptr && *env != '\0' ? fs::path(env) : source_dir / ".venv";
}

std::string MotoSkipReason(const fs::path& venv) {
  if (fs::exists(venv / "bin" / "moto_server")) return "";
  Result<std::string> why = ReadFile((venv / "peers-unavailable").string());
  return why.ok() ? *why : "";
}

Result<std::unique_ptr<MotoServer>> MotoServer::Start(const MotoOptions& o) {
  const fs::path server = o.venv / "bin" / "moto_server";
  if (!fs::exists(server)) {
    return FailedPreconditionError(
        server.string() +
        " does not exist: run `make deps` (scripts/install-python-peers.sh) to make the "
        "project's Python environment");
  }
  std::unique_ptr<MotoServer> m(new MotoServer());
  SPOT_ASSIGN_OR_RETURN(int port, PickFreePort());
  m->port_ = port;
  m->endpoint_ = fmt::format("http://127.0.0.1:{}", port);
  std::vector<std::pair<std::string, std::string>> env = {
      {"S3_UPLOAD_PART_MIN_SIZE", std::to_string(o.min_part_size)}};
  if (o.auth) env.emplace_back("INITIAL_NO_AUTH_ACTION_COUNT", "3");
  SPOT_ASSIGN_OR_RETURN(
      m->pid_, Spawn({.argv = {server.string(), "-H", "127.0.0.1", "-p", std::to_string(port)},
                      .env = env,
                      .log_path = o.log_path.string(),
                      .truncate = true,
                      .group = ProcessGroup::kNewGroup}));
  const std::string keys = o.log_path.string() + ".keys";
  SPOT_ASSIGN_OR_RETURN(
      int64_t setup, Spawn({.argv = {(o.venv / "bin" / "python").string(), "-c",
                                     std::string(kSetup), m->endpoint_, o.auth ? "1" : "0", keys},
                            .log_path = o.log_path.string() + ".setup",
                            .truncate = true}));
  Result<ProcessStatus> ended = WaitProcess(setup, 120);
  if (!ended.ok()) {
    (void)StopProcess(setup, 0);
    return UnavailableError("starting moto at " + m->endpoint_ + ": the setup did not finish");
  }
  const ProcessStatus done = *ended;
  if (done.exit_code != 0) {
    Result<std::string> log = ReadFile(o.log_path.string() + ".setup");
    return UnavailableError(fmt::format("starting moto at {}: setup {}: {}", m->endpoint_,
                                        DescribeExit(done), log.ok() ? *log : ""));
  }
  std::ifstream in(keys);
  std::getline(in, m->credentials_.access_key_id);
  std::getline(in, m->credentials_.secret_access_key);
  m->credentials_.source = "moto";
  return m;
}

MotoServer::~MotoServer() {
  if (pid_ > 0) (void)StopProcess(pid_, 2, /*whole_group=*/true);
}

AwsConfig MotoServer::Config() const {
  return AwsConfig{.endpoint = endpoint_, .region = "us-east-1", .credentials = credentials_};
}

Status MotoServer::CreateBucket(const std::string& bucket) const {
  HttpClient http(credentials_, "us-east-1", "s3", RetryOptions{.max_attempts = 1});
  SPOT_ASSIGN_OR_RETURN(HttpResponse r, http.SendOnce({.method = "PUT",
                                                       .url = endpoint_ + "/" + bucket,
                                                       .payload_hash_header = true,
                                                       .what = "CreateBucket"}));
  if (r.status / 100 != 2) {
    return UnavailableError(fmt::format("CreateBucket {}: HTTP {}: {}", bucket, r.status, r.body));
  }
  return Status::Ok();
}

namespace {

// One HTTP request: headers, then Content-Length bytes of body.
std::string ReadRequest(int fd) {
  std::string req;
  char buf[65536];
  size_t need = std::string::npos;
  while (need == std::string::npos || req.size() < need) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
    const size_t end = req.find("\r\n\r\n");
    if (need == std::string::npos && end != std::string::npos) {
      size_t length = 0;
      std::string lower = req.substr(0, end);
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const size_t cl = lower.find("\r\ncontent-length:");
      if (cl != std::string::npos) {
        const size_t from = lower.find_first_not_of(' ', cl + 17);
        auto v = ParseInteger(lower.substr(from, lower.find('\r', from) - from));
        if (v.ok() && *v >= 0) length = static_cast<size_t>(*v);
      }
      need = end + 4 + length;
    }
  }
  return req;
}

void WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n <= 0) return;
    s.remove_prefix(static_cast<size_t>(n));
  }
}

sockaddr_in Loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  return a;
}

}  // namespace

FailingProxy::FailingProxy(int upstream_port, ErrorBody error_body)
    : upstream_(upstream_port), error_body_(std::move(error_body)) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = Loopback(0);
  socklen_t len = sizeof(a);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return;  // ok() is false
  }
  port_ = ntohs(a.sin_port);
  thread_ = std::thread([this] { Serve(); });
}

FailingProxy::~FailingProxy() {
  stop_ = true;
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
  }
  if (thread_.joinable()) thread_.join();
}

void FailingProxy::Fail(int status, const std::string& code, int times) {
  std::lock_guard<std::mutex> l(mu_);
  for (int i = 0; i < times; ++i) canned_.emplace_back(status, code);
}

void FailingProxy::Serve() {
  while (!stop_) {
    int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    std::string req = ReadRequest(c);
    ++requests_;
    std::optional<std::pair<int, std::string>> fail;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!canned_.empty()) {
        fail = canned_.front();
        canned_.pop_front();
      }
    }
    if (fail) {
      const std::string body = error_body_(fail->second);
      WriteAll(c, fmt::format("HTTP/1.1 {} Injected\r\nContent-Length: {}\r\nConnection: "
                              "close\r\n\r\n{}",
                              fail->first, body.size(), body));
    } else {
      // One request per upstream connection: ask the server to close it.
      const size_t eol = req.find("\r\n");
      if (eol != std::string::npos) req.insert(eol + 2, "Connection: close\r\n");
      int u = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a = Loopback(upstream_);
      if (u >= 0 && ::connect(u, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
        WriteAll(u, req);
        char buf[65536];
        for (ssize_t n; (n = ::read(u, buf, sizeof(buf))) > 0;) {
          WriteAll(c, {buf, static_cast<size_t>(n)});
        }
      }
      if (u >= 0) ::close(u);
    }
    ::close(c);
  }
}

MotoServer* SharedMotoServer(const std::filesystem::path& source_dir, MotoOptions options) {
  static std::optional<TempDir> dir;
  static std::unique_ptr<MotoServer> server;
  static std::once_flag once;
  std::call_once(once, [&] {
    options.venv = VenvDir(source_dir);
    std::string failure;
    if (auto d = TempDir::Create("spot_moto"); d.ok()) {
      dir.emplace(std::move(d).value());
      options.log_path = dir->path() / "moto.log";
      auto s = MotoServer::Start(options);
      if (s.ok()) server = std::move(s).value();
      if (!s.ok()) failure = s.status().ToString();
    } else {
      failure = d.status().ToString();
    }
    if (server) return;
    if (const std::string skip = MotoSkipReason(options.venv); !skip.empty()) {
      std::cerr << "SKIPPED: moto is not installed because PyPI was unreachable when the Python "
                   "environment was made:\n"
                << skip;
    } else {
      ADD_FAILURE() << "moto's server did not start: " << failure;
    }
  });
  return server.get();
}

}  // namespace spot::aws
