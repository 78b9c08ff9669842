#include "ckpt/s3_testing.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "ckpt/s3_client.h"
#include "core/file_io.h"
#include "core/net.h"
#include "core/process.h"

namespace spot::ckpt {
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

S3Config MotoServer::Config() const {
  return S3Config{.endpoint = endpoint_, .region = "us-east-1", .credentials = credentials_};
}

Status MotoServer::CreateBucket(const std::string& bucket) const {
  S3Client client(Config(), bucket, S3RetryOptions{});
  return client.Send({.method = "PUT", .what = "CreateBucket"}).status();
}

}  // namespace spot::ckpt
