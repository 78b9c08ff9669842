// Test and benchmark support: a real AWS server (moto's S3 and EC2, from the
// project's Python environment .venv) on loopback, run as a child process,
// and a proxy in front of it that injects failures.
//
//   auto moto = MotoServer::Start({.log_path = dir / "moto.log"});
//   if (!moto.ok()) ...;  // Unavailable with MotoSkipReason() != "": skip loudly
//   ASSERT_TRUE((*moto)->CreateBucket("ckpts").ok());
//   auto store = S3BlobStore::Open("s3://ckpts/job", (*moto)->Config());
//
// With `auth`, the server checks every request's signature: the first three
// requests (unauthenticated) make an IAM user with full access and its key,
// which Config() then carries, so the signing is tested, not just the calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "aws/aws_config.h"
#include "core/status.h"

namespace spot::aws {

// The project's Python environment: $SPOT_VENV, else <source>/.venv.
std::filesystem::path VenvDir(const std::filesystem::path& source_dir);

// Why moto cannot run here ("" when it can): the text of
// .venv/peers-unavailable when PyPI was unreachable while the environment
// was made. A missing moto_server without that marker is a setup error.
std::string MotoSkipReason(const std::filesystem::path& venv);

struct MotoOptions {
  std::filesystem::path venv;      // the Python environment holding moto_server
  std::filesystem::path log_path;  // the server's stdout and stderr
  bool auth = true;                // check signatures (see above)
  // Smallest multipart part but the last the server accepts (S3: 5 MiB).
  uint64_t min_part_size = 5u << 20;
};

class MotoServer {
 public:
  // Starts it on a free loopback port and waits (up to 60 s) until it answers.
  static Result<std::unique_ptr<MotoServer>> Start(const MotoOptions& options);
  ~MotoServer();

  // endpoint http://127.0.0.1:<port>, region us-east-1, the server's credentials.
  AwsConfig Config() const;
  const std::string& endpoint() const { return endpoint_; }
  int port() const { return port_; }
  int64_t pid() const { return pid_; }
  Status CreateBucket(const std::string& bucket) const;

 private:
  MotoServer() = default;
  int64_t pid_ = 0;
  int port_ = 0;
  std::string endpoint_;
  AwsCredentials credentials_;
};

// The one server of a test program, started on first use with `options`
// (venv and log_path are filled in: <source>/.venv, a temporary directory)
// and kept until the program exits. nullptr when it could not start: with a
// loud "SKIPPED" on stderr when PyPI was unreachable when the environment was
// made (MotoSkipReason), else a test failure naming why. Thread-safe; every
// call after the first returns the same server (`options` then unused).
MotoServer* SharedMotoServer(const std::filesystem::path& source_dir, MotoOptions options = {});

// A thin HTTP proxy on loopback in front of a server (S3's, EC2's): answers
// the next requests with canned failures, each with the body
// `error_body(code)` (S3's and EC2's XML differ), and forwards the rest, one
// request per connection (it asks the server to close each).
class FailingProxy {
 public:
  using ErrorBody = std::function<std::string(const std::string& code)>;
  FailingProxy(int upstream_port, ErrorBody error_body);
  ~FailingProxy();
  FailingProxy(const FailingProxy&) = delete;
  FailingProxy& operator=(const FailingProxy&) = delete;

  bool ok() const { return port_ > 0; }  // listening
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The next `times` requests get HTTP `status` with error `code`.
  void Fail(int status, const std::string& code, int times);
  int requests() const { return requests_; }

 private:
  void Serve();

  const int upstream_;
  const ErrorBody error_body_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::deque<std::pair<int, std::string>> canned_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace spot::aws
