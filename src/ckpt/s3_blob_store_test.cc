// The S3 tier against a real S3 server: moto's, from the project's .venv,
// started once for this binary with signature checking on (aws/aws_testing.h).
#include "ckpt/s3_blob_store.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "aws/aws_testing.h"
#include "ckpt/blob_store_contract.h"
#include "ckpt/store.h"
#include "ckpt/store_testing.h"
#include "core/net.h"
#include "core/process.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

namespace fs = std::filesystem;
using aws::FailingProxy;
using aws::MotoServer;
using aws::MotoSkipReason;
using aws::VenvDir;

// Small parts (the server accepts them, see Moto()) so that multipart uploads
// of many parts stay quick; a small page so that listings paginate.
S3StoreOptions TestOptions() {
  S3StoreOptions o;
  o.part_size = 64 << 10;
  o.list_page_size = 7;
  o.retry.max_attempts = 4;
  o.retry.initial_backoff_s = 0.01;
  o.retry.max_backoff_s = 0.05;
  return o;
}

// The server shared by every test of this binary, started on first use;
// nullptr (the test skipped) when PyPI was unreachable when .venv was made.
MotoServer* Moto() { return aws::SharedMotoServer(SPOT_SOURCE_DIR, {.min_part_size = 1024}); }

std::string NewBucket() {
  static std::atomic<int> n{0};
  std::string b = "spot-test-" + std::to_string(++n);
  Status s = Moto()->CreateBucket(b);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return b;
}

#define SKIP_WITHOUT_MOTO()                                     \
  do {                                                          \
    if (Moto() == nullptr) {                                    \
      if (!HasFailure()) GTEST_SKIP() << "moto is unavailable"; \
      return;                                                   \
    }                                                           \
  } while (0)

struct S3Factory {
  void SetUp() {
    if (Moto() == nullptr) {
      if (!::testing::Test::HasFailure()) GTEST_SKIP() << "moto is unavailable";
      return;
    }
    bucket = NewBucket();
  }
  Result<std::unique_ptr<BlobStore>> Open(const std::string& name) {
    auto s = S3BlobStore::Open("s3://" + bucket + "/" + name, Moto()->Config(), TestOptions());
    if (!s.ok()) return s.status();
    return std::unique_ptr<BlobStore>(std::move(s).value());
  }
  std::string bucket;
};
INSTANTIATE_TYPED_TEST_SUITE_P(S3, BlobStoreContractTest, S3Factory);

class S3BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_MOTO();
    bucket_ = NewBucket();
    store_ = OpenStore("job");
  }
  std::unique_ptr<S3BlobStore> OpenStore(const std::string& prefix,
                                         S3StoreOptions o = TestOptions(),
                                         std::optional<aws::AwsConfig> config = std::nullopt) {
    auto s =
        S3BlobStore::Open("s3://" + bucket_ + "/" + prefix, config ? *config : Moto()->Config(), o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::string bucket_;
  std::unique_ptr<S3BlobStore> store_;
};

TEST_F(S3BlobStoreTest, MultipartBlobReadsBackByRanges) {
  const uint64_t part = store_->options().part_size;
  const std::string data = RandomBytes(5 * part + 777, 11);
  auto w = store_->Create("big.bin");
  ASSERT_TRUE(w.ok());
  for (size_t at = 0; at < data.size(); at += 10000) {
    ASSERT_TRUE((*w)->Append(std::string_view(data).substr(at, 10000)).ok());
  }
  // Five parts are up, the upload is pending, nothing is visible.
  EXPECT_EQ(*store_->PendingUploads(), std::vector<std::string>{"big.bin"});
  EXPECT_EQ(store_->Size("big.bin").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_TRUE(store_->PendingUploads()->empty());
  EXPECT_EQ(*store_->Size("big.bin"), data.size());
  // Ranges inside a part, across part boundaries, the tail.
  for (auto [offset, n] : std::vector<std::pair<uint64_t, size_t>>{
           {0, 10}, {part - 5, 10}, {2 * part - 1, part + 2}, {5 * part, 777}, {0, data.size()}}) {
    std::string buf(n, '\0');
    ASSERT_TRUE(store_->ReadInto("big.bin", offset, std::span<char>(buf)).ok()) << offset;
    EXPECT_TRUE(buf == data.substr(offset, n)) << offset << "+" << n;
  }
  std::string past(2, '\0');
  EXPECT_EQ(store_->ReadInto("big.bin", data.size() - 1, std::span<char>(past)).code(),
            StatusCode::kDataLoss);
  // Exactly one part goes as a single PUT, one byte more as two parts.
  for (uint64_t n : {part, part + 1}) {
    ASSERT_TRUE(store_->Put("edge", std::string_view(data).substr(0, n)).ok()) << n;
    EXPECT_TRUE(*store_->Read("edge") == data.substr(0, n)) << n;
  }
}

TEST_F(S3BlobStoreTest, ListPaginatesAndStaysInsideItsPrefix) {
  std::vector<std::string> want;
  for (int i = 0; i < 23; ++i) {  // > 3 pages of 7
    want.push_back(fmt::format("ckpt-{:06}.json", i));
    ASSERT_TRUE(store_->Put(want.back(), std::to_string(i)).ok());
  }
  // Neighbours: a nested prefix (the data cache's), a sibling sharing the
  // prefix's first letters, the bucket's root.
  auto nested = OpenStore("job/data-cache");
  auto sibling = OpenStore("jobs");
  ASSERT_TRUE(nested && sibling);
  ASSERT_TRUE(nested->Put("chunk-1", "x").ok());
  ASSERT_TRUE(sibling->Put("ckpt-000999.json", "y").ok());
  auto root = S3BlobStore::Open("s3://" + bucket_, Moto()->Config(), TestOptions());
  ASSERT_TRUE(root.ok());
  ASSERT_TRUE((*root)->Put("top", "z").ok());
  auto l = store_->List();
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(*l, want);
  EXPECT_EQ(*nested->List(), std::vector<std::string>{"chunk-1"});
  EXPECT_EQ(*(*root)->List(), std::vector<std::string>{"top"});
  EXPECT_EQ(store_->Describe("a"), "s3://" + bucket_ + "/job/a");
}

TEST_F(S3BlobStoreTest, UncommittedWriterAbortsItsMultipartUpload) {
  ASSERT_TRUE(store_->Put("v", "old").ok());
  {
    auto w = store_->Create("v");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(RandomBytes(3 * store_->options().part_size + 1, 3)).ok());
    EXPECT_EQ(*store_->PendingUploads(), std::vector<std::string>{"v"});
  }
  EXPECT_TRUE(store_->PendingUploads()->empty());
  EXPECT_EQ(*store_->Read("v"), "old");
  EXPECT_EQ(*store_->List(), std::vector<std::string>{"v"});
}

// Run by the SIGKILL tests in a child process. Mode "upload": starts a
// multipart upload over blob "v", says so in the marker file, waits to be
// killed. Mode "commit": commits blob "w" over and over, alternating between
// two multipart contents, saying so after the first commit.
TEST(S3HelperProcess, DISABLED_UploadAndWait) {
  const char* endpoint = std::getenv("SPOT_S3_HELPER_ENDPOINT");
  ASSERT_NE(endpoint, nullptr);
  aws::AwsConfig cfg{.endpoint = endpoint,
                     .credentials = {.access_key_id = std::getenv("SPOT_S3_HELPER_KEY"),
                                     .secret_access_key = std::getenv("SPOT_S3_HELPER_SECRET")}};
  S3StoreOptions o = TestOptions();
  o.abort_pending_uploads = false;
  auto s = S3BlobStore::Open(std::getenv("SPOT_S3_HELPER_LOCATION"), cfg, o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string marker = std::getenv("SPOT_S3_HELPER_MARKER");
  if (std::string(std::getenv("SPOT_S3_HELPER_MODE")) == "commit") {
    for (uint64_t i = 0;; ++i) {
      ASSERT_TRUE((*s)->Put("w", RandomBytes(4 * o.part_size + 10, 100 + i % 2)).ok());
      if (i == 0) std::ofstream(marker) << "committed\n";
    }
  }
  auto w = (*s)->Create("v");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(RandomBytes(4 * o.part_size + 10, 5)).ok());
  std::ofstream(marker) << "parts uploaded\n";
  std::this_thread::sleep_for(std::chrono::minutes(5));
}

// Starts the helper above in `mode`, waits (bounded) for its marker, then
// waits `delay_ms` more and SIGKILLs it.
void RunAndKillHelper(const std::string& mode, const std::string& location, int delay_ms) {
  auto dir = TempDir::Create("spot_s3_kill");
  ASSERT_TRUE(dir.ok());
  const fs::path marker = dir->path() / "marker";
  const aws::AwsConfig cfg = Moto()->Config();
  auto pid = Spawn({.argv = {"s3_helper", "--gtest_filter=S3HelperProcess.DISABLED_UploadAndWait",
                             "--gtest_also_run_disabled_tests"},
                    .env = {{"SPOT_S3_HELPER_ENDPOINT", cfg.endpoint},
                            {"SPOT_S3_HELPER_KEY", cfg.credentials.access_key_id},
                            {"SPOT_S3_HELPER_SECRET", cfg.credentials.secret_access_key},
                            {"SPOT_S3_HELPER_LOCATION", location},
                            {"SPOT_S3_HELPER_MODE", mode},
                            {"SPOT_S3_HELPER_MARKER", marker.string()}},
                    .log_path = (dir->path() / "helper.log").string(),
                    .program = "/proc/self/exe",
                    .group = ProcessGroup::kNewGroup,
                    .parent_death_signal = SIGKILL});
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  for (int i = 0; i < 1200 && !fs::exists(marker) && CheckProcess(*pid).running; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!fs::exists(marker)) {
    auto log = ReadFile((dir->path() / "helper.log").string());
    FAIL() << "the helper did not get going: " << (log.ok() ? *log : log.status().ToString());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  SignalProcess(*pid, SIGKILL);
  auto ended = WaitProcess(*pid, 30);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(ended->signal, SIGKILL) << "the helper ended before the kill";
}

TEST_F(S3BlobStoreTest, SigkillDuringMultipartUploadLeavesNoTornBlob) {
  ASSERT_TRUE(store_->Put("v", "version 1").ok());
  ASSERT_NO_FATAL_FAILURE(RunAndKillHelper("upload", "s3://" + bucket_ + "/job", 0));
  // The old blob is intact; the dead writer's upload is pending, not visible.
  EXPECT_EQ(*store_->Read("v"), "version 1");
  EXPECT_EQ(*store_->List(), std::vector<std::string>{"v"});
  EXPECT_EQ(*store_->PendingUploads(), std::vector<std::string>{"v"});
  // A reader leaves it alone; the next writer's Open aborts it.
  S3StoreOptions reader = TestOptions();
  reader.abort_pending_uploads = false;
  ASSERT_NE(OpenStore("job", reader), nullptr);
  EXPECT_EQ(store_->PendingUploads()->size(), 1u);
  auto writer = OpenStore("job");
  ASSERT_NE(writer, nullptr);
  EXPECT_TRUE(store_->PendingUploads()->empty());
  EXPECT_EQ(*writer->Read("v"), "version 1");
}

// Killed at arbitrary points of a loop of multipart commits, the writer
// leaves blob "w" whole: one of the two contents it writes, never a mix or a
// prefix (whatever the moment of the kill, so the check holds for any timing).
TEST_F(S3BlobStoreTest, SigkillDuringCommitsLeavesOneWholeVersion) {
  const uint64_t n = 4 * store_->options().part_size + 10;
  const std::string a = RandomBytes(n, 100), b = RandomBytes(n, 101);
  for (int delay_ms : {0, 7, 31, 97}) {
    ASSERT_NO_FATAL_FAILURE(RunAndKillHelper("commit", "s3://" + bucket_ + "/job", delay_ms));
    auto got = store_->Read("w");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == a || *got == b) << "torn blob after a kill " << delay_ms << " ms in";
    EXPECT_EQ(*store_->List(), std::vector<std::string>{"w"});
  }
}

// Log lines of the default logger while it lives.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// S3's error body for an injected failure.
std::string S3ErrorBody(const std::string& code) {
  return "<Error><Code>" + code + "</Code><Message>injected " + code + "</Message></Error>";
}

TEST_F(S3BlobStoreTest, ThrottlingAndServerErrorsAreRetriedWithBackoff) {
  FailingProxy proxy(Moto()->port(), S3ErrorBody);
  ASSERT_TRUE(proxy.ok());
  aws::AwsConfig cfg = Moto()->Config();
  cfg.endpoint = proxy.endpoint();
  auto s = OpenStore("job", TestOptions(), cfg);
  ASSERT_NE(s, nullptr);
  LogCapture logs;
  const int before = proxy.requests();
  proxy.Fail(503, "SlowDown", 1);
  proxy.Fail(500, "InternalError", 1);
  proxy.Fail(429, "TooManyRequests", 1);
  ASSERT_TRUE(s->Put("a", "payload").ok());
  EXPECT_EQ(proxy.requests() - before, 4);  // three failures, then the PUT
  proxy.Fail(400, "RequestTimeout", 1);
  std::string r(7, '\0');
  Status read = s->ReadInto("a", 0, std::span<char>(r));  // a GET
  ASSERT_TRUE(read.ok()) << read.ToString();
  EXPECT_EQ(r, "payload");
  // Failing on every attempt: Unavailable, after max_attempts requests.
  const int start = proxy.requests();
  proxy.Fail(503, "SlowDown", 4);  // as many as the attempts
  Status put = s->Put("b", "x");
  EXPECT_EQ(put.code(), StatusCode::kUnavailable) << put.ToString();
  EXPECT_NE(put.message().find("SlowDown"), std::string::npos) << put.ToString();
  EXPECT_NE(put.message().find("s3://" + bucket_ + "/job/b"), std::string::npos);
  EXPECT_EQ(proxy.requests() - start, 4);
  // A request error is not retried.
  proxy.Fail(400, "InvalidRequest", 1);
  const int one = proxy.requests();
  Status bad = s->Put("c", "x");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("InvalidRequest"), std::string::npos);
  EXPECT_EQ(proxy.requests() - one, 1);
  EXPECT_NE(logs.text().find("retrying"), std::string::npos);
  EXPECT_EQ(logs.text().find(cfg.credentials.secret_access_key), std::string::npos);
}

TEST_F(S3BlobStoreTest, UnreachableEndpointIsUnavailable) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  aws::AwsConfig cfg = Moto()->Config();
  cfg.endpoint = "http://127.0.0.1:" + std::to_string(*port);
  S3StoreOptions o = TestOptions();
  o.abort_pending_uploads = false;
  o.retry.max_attempts = 2;
  auto s = OpenStore("job", o, cfg);
  ASSERT_NE(s, nullptr);
  auto l = s->List();
  EXPECT_EQ(l.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(l.status().message().find("gave up after 2 attempts"), std::string::npos)
      << l.status().ToString();
}

TEST_F(S3BlobStoreTest, BadCredentialsFailClearlyWithoutTheSecret) {
  LogCapture logs;
  const std::string secret = "Wr0ngSecretKeyValue/ForTheTest+0123456789";
  struct Case {
    std::string key_id;
    std::string code;
  };
  for (const Case& c : {Case{Moto()->Config().credentials.access_key_id, "SignatureDoesNotMatch"},
                        Case{"AKIAUNKNOWNKEY000000", "InvalidAccessKeyId"}}) {
    aws::AwsConfig cfg = Moto()->Config();
    cfg.credentials.access_key_id = c.key_id;
    cfg.credentials.secret_access_key = secret;
    auto opened = S3BlobStore::Open("s3://" + bucket_ + "/job", cfg, TestOptions());
    ASSERT_EQ(opened.status().code(), StatusCode::kFailedPrecondition) << c.code;
    S3StoreOptions o = TestOptions();
    o.abort_pending_uploads = false;
    auto s = OpenStore("job", o, cfg);
    ASSERT_NE(s, nullptr);
    // (A HEAD's answer has no body, so Size tells no S3 error code.)
    char buf[1];
    for (const Status& st : {opened.status(), s->Put("a", "x"), s->List().status(),
                             s->ReadInto("a", 0, buf), s->Delete("a")}) {
      EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
      EXPECT_NE(st.message().find(c.code), std::string::npos) << st.ToString();
      EXPECT_NE(st.message().find("credentials"), std::string::npos) << st.ToString();
      EXPECT_EQ(st.message().find(secret), std::string::npos) << st.ToString();
    }
    Status size = s->Size("a").status();
    EXPECT_EQ(size.code(), StatusCode::kFailedPrecondition) << size.ToString();
    EXPECT_NE(size.message().find("HTTP 403"), std::string::npos) << size.ToString();
  }
  EXPECT_EQ(logs.text().find(secret), std::string::npos);
  // The right credentials still work (the server checks signatures).
  EXPECT_TRUE(store_->Put("a", "x").ok());
}

TEST_F(S3BlobStoreTest, OpenRejectsBadLocationsAndOptions) {
  EXPECT_EQ(S3BlobStore::Open("s3://x", Moto()->Config()).status().code(),
            StatusCode::kInvalidArgument);
  S3StoreOptions o = TestOptions();
  o.part_size = 0;
  EXPECT_EQ(S3BlobStore::Open("s3://" + bucket_, Moto()->Config(), o).status().code(),
            StatusCode::kInvalidArgument);
  o = TestOptions();
  o.list_page_size = 1001;
  EXPECT_EQ(S3BlobStore::Open("s3://" + bucket_, Moto()->Config(), o).status().code(),
            StatusCode::kInvalidArgument);
  // A bucket that does not exist: NotFound naming it.
  auto missing = S3BlobStore::Open("s3://no-such-bucket-here/x", Moto()->Config(), TestOptions());
  ASSERT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-bucket-here"), std::string::npos);
}

// The checkpoint store with an S3 durable tier, opened from the environment
// as `checkpoint.durable_dir: s3://bucket/prefix` is: versions are saved and
// replicated, the local tier is lost, a new store resumes from S3.
TEST_F(S3BlobStoreTest, CheckpointStoreResumesFromTheS3TierAfterLosingTheLocalOne) {
  auto dir = TempDir::Create("spot_s3_store");
  ASSERT_TRUE(dir.ok());
  const aws::AwsConfig cfg = Moto()->Config();
  setenv("AWS_ENDPOINT_URL", cfg.endpoint.c_str(), 1);
  setenv("AWS_ACCESS_KEY_ID", cfg.credentials.access_key_id.c_str(), 1);
  setenv("AWS_SECRET_ACCESS_KEY", cfg.credentials.secret_access_key.c_str(), 1);
  setenv("AWS_REGION", "us-east-1", 1);
  const StoreOptions options{.dir = (dir->path() / "local").string(),
                             .durable_dir = "s3://" + bucket_ + "/ckpt/mnist",
                             .retention = {.keep_last = 2}};
  {
    auto store = CheckpointStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      Container c = store_testing::State(seed);
      auto v = (*store)->Save(c, {.step = static_cast<int64_t>(10 * seed)});
      ASSERT_TRUE(v.ok()) << v.status().ToString();
    }
  }
  // Retention ran in S3 too: two versions, each a data file and a manifest.
  auto durable = OpenStore("ckpt/mnist");
  ASSERT_NE(durable, nullptr);
  EXPECT_EQ(*durable->List(), (std::vector<std::string>{"ckpt-000003.bin", "ckpt-000003.json",
                                                        "ckpt-000004.bin", "ckpt-000004.json"}));
  fs::remove_all(options.dir);  // the machine is gone
  auto store = CheckpointStore::Open(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto versions = (*store)->List();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions[0].id, 4);
  EXPECT_EQ(versions[0].tiers, std::vector<Tier>{Tier::kDurable});
  auto loaded = (*store)->LoadNewestValid();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->info.step, 40);
  store_testing::ExpectSame(loaded->container, store_testing::State(4));
  // It goes on saving: the next id follows the durable tier's.
  Container c = store_testing::State(5);
  auto v = (*store)->Save(c, {.step = 50});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->id, 5);
  EXPECT_EQ(*durable->Size("ckpt-000005.bin"), v->file_bytes);
  for (const char* var :
       {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) {
    unsetenv(var);
  }
}

}  // namespace
}  // namespace spot::ckpt
