// The KvStore contract, written once: every backend's test instantiates
// KvStoreContractTest with a Backend that makes a fresh, empty store
// (kv_store_test.cc: memory and etcd; c10d_stores_test.cc: TCPStore).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "dist/kv_store.h"

namespace spot::dist::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Makes a fresh, empty store whose keys live under a name unique to the test.
// FailedPrecondition skips the test (a server that is not installed).
struct Backend {
  std::string name;
  std::function<Result<std::unique_ptr<KvStore>>(const std::string& prefix, seconds ttl)> make;
};

inline void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }  // for test names

class KvStoreContractTest : public ::testing::TestWithParam<Backend> {
 protected:
  static constexpr seconds kTtl{1};

  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    Result<std::unique_ptr<KvStore>> made = GetParam().make(info->name(), kTtl);
    if (made.status().code() == StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << made.status().ToString();
    }
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    store_ = std::move(made).value();
  }

  std::optional<std::string> MustGet(const std::string& key) {
    Result<std::optional<std::string>> v = store_->Get(key);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : std::nullopt;
  }
  bool MustCas(const std::string& key, const std::optional<std::string>& expected,
               const std::string& desired) {
    Result<bool> r = store_->CompareAndSwap(key, expected, desired);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && *r;
  }
  bool MustBeAlive(const std::string& id) {
    Result<bool> r = store_->IsAlive(id);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && *r;
  }

  std::unique_ptr<KvStore> store_;
};

TEST_P(KvStoreContractTest, GetOfMissingKeyIsNullopt) {
  EXPECT_EQ(MustGet("missing"), std::nullopt);
}

TEST_P(KvStoreContractTest, PutThenGetAndOverwrite) {
  ASSERT_TRUE(store_->Put("k", "v1").ok());
  EXPECT_EQ(MustGet("k"), "v1");
  ASSERT_TRUE(store_->Put("k", "v2").ok());
  EXPECT_EQ(MustGet("k"), "v2");
}

TEST_P(KvStoreContractTest, ValuesAreBinarySafe) {
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  // Lengths 0..5 cover every base64 padding case.
  std::vector<std::string> values = {"",        "a",
                                     "ab",      "abc",
                                     "abcd",    std::string("\0b\xff\0e", 5),
                                     all_bytes, std::string(100000, '\x80')};
  for (size_t i = 0; i < values.size(); ++i) {
    std::string key = "bin" + std::to_string(i);
    ASSERT_TRUE(store_->Put(key, values[i]).ok());
    EXPECT_EQ(MustGet(key), values[i]) << "value #" << i;
  }
}

TEST_P(KvStoreContractTest, KeysWithSlashesAreDistinct) {
  ASSERT_TRUE(store_->Put("a", "1").ok());
  ASSERT_TRUE(store_->Put("a/b", "2").ok());
  ASSERT_TRUE(store_->Put("a/b/c", "3").ok());
  ASSERT_TRUE(store_->Put(std::string("a/\xff\0", 4), "4").ok());
  EXPECT_EQ(MustGet("a"), "1");
  EXPECT_EQ(MustGet("a/b"), "2");
  EXPECT_EQ(MustGet("a/b/c"), "3");
  EXPECT_EQ(MustGet(std::string("a/\xff\0", 4)), "4");
  EXPECT_EQ(MustGet("a/"), std::nullopt);
}

TEST_P(KvStoreContractTest, DeleteRemovesAndMissingIsOk) {
  ASSERT_TRUE(store_->Put("k", "v").ok());
  ASSERT_TRUE(store_->Delete("k").ok());
  EXPECT_EQ(MustGet("k"), std::nullopt);
  EXPECT_TRUE(store_->Delete("k").ok());
  EXPECT_TRUE(store_->Delete("never-there").ok());
}

TEST_P(KvStoreContractTest, CompareAndSwapWhenAbsent) {
  EXPECT_TRUE(MustCas("k", std::nullopt, "first"));
  EXPECT_EQ(MustGet("k"), "first");
  EXPECT_FALSE(MustCas("k", std::nullopt, "second"));  // present now
  EXPECT_EQ(MustGet("k"), "first");
}

TEST_P(KvStoreContractTest, CompareAndSwapWhenExpected) {
  ASSERT_TRUE(store_->Put("k", "old").ok());
  EXPECT_TRUE(MustCas("k", "old", "new"));
  EXPECT_EQ(MustGet("k"), "new");
  ASSERT_TRUE(store_->Put("empty", "").ok());
  EXPECT_TRUE(MustCas("empty", "", "filled"));
  EXPECT_EQ(MustGet("empty"), "filled");
}

TEST_P(KvStoreContractTest, CompareAndSwapMismatchLeavesValue) {
  ASSERT_TRUE(store_->Put("k", "actual").ok());
  EXPECT_FALSE(MustCas("k", "other", "new"));
  EXPECT_EQ(MustGet("k"), "actual");
  EXPECT_FALSE(MustCas("absent", "", "new"));  // "" is a value, not absence
  EXPECT_EQ(MustGet("absent"), std::nullopt);
}

// 8 threads each add 1 to a counter 50 times through read + CAS retry loops.
// (EtcdKvStore gives concurrent calls their own connections, so for etcd this
// is 8 clients racing.)
TEST_P(KvStoreContractTest, ContendedCompareAndSwapLosesNoIncrement) {
  constexpr int kThreads = 8, kIncrements = 50;
  ASSERT_TRUE(store_->Put("counter", "0").ok());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int done = 0; done < kIncrements && errors == 0;) {
        Result<std::optional<std::string>> cur = store_->Get("counter");
        if (!cur.ok() || !cur->has_value()) {
          ++errors;
          return;
        }
        std::string next = std::to_string(std::stoi(**cur) + 1);
        Result<bool> swapped = store_->CompareAndSwap("counter", *cur, next);
        if (!swapped.ok()) {
          ++errors;
          return;
        }
        done += *swapped ? 1 : 0;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(MustGet("counter"), std::to_string(kThreads * kIncrements));
}

TEST_P(KvStoreContractTest, LivenessTtlIsTheConfiguredOne) {
  EXPECT_EQ(store_->liveness_ttl(), milliseconds(kTtl));
}

TEST_P(KvStoreContractTest, HeartbeatMakesAliveAndMarkDeadEndsIt) {
  EXPECT_FALSE(MustBeAlive("w0"));
  ASSERT_TRUE(store_->Heartbeat("w0").ok());
  EXPECT_TRUE(MustBeAlive("w0"));
  EXPECT_FALSE(MustBeAlive("w1"));
  ASSERT_TRUE(store_->MarkDead("w0").ok());
  EXPECT_FALSE(MustBeAlive("w0"));
  EXPECT_TRUE(store_->MarkDead("never-seen").ok());
  ASSERT_TRUE(store_->Heartbeat("w0").ok());  // a heartbeat after MarkDead revives
  EXPECT_TRUE(MustBeAlive("w0"));
}

TEST_P(KvStoreContractTest, RegularHeartbeatsKeepAliveBeyondTtl) {
  auto end = Clock::now() + milliseconds(kTtl) * 3 / 2;
  while (Clock::now() < end) {
    ASSERT_TRUE(store_->Heartbeat("w0").ok());
    ASSERT_TRUE(MustBeAlive("w0"));
    std::this_thread::sleep_for(kTtl / 4);
  }
}

TEST_P(KvStoreContractTest, NoHeartbeatWithinTtlMeansDead) {
  auto beat = Clock::now();
  ASSERT_TRUE(store_->Heartbeat("w0").ok());
  EXPECT_TRUE(MustBeAlive("w0"));
  // Generous bounds: etcd checks lease expiry only twice a second.
  auto deadline = beat + kTtl + milliseconds(1500);
  while (MustBeAlive("w0") && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  auto dead_after = Clock::now() - beat;
  EXPECT_FALSE(MustBeAlive("w0")) << "still alive " << kTtl.count() << " s + 1.5 s after a beat";
  EXPECT_GE(dead_after, kTtl - milliseconds(500));
}

}  // namespace spot::dist::testing
