// End-to-end tests of the folder data sets: an image folder (PNG and JPEG of
// mixed sizes, decoded and resized, with augmentation) trained by `spot
// train`, killed and resumed, and by three elastic workers with one killed
// and one joining; and a CSV table trained by a scripted model.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <png.h>
#include <signal.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "apps/spot/e2e_support.h"
#include "apps/spot/elastic_e2e_support.h"
#include "apps/spot/test_process.h"
#include "core/file_io.h"

namespace spot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ChildProcess;
using testing::ProcessResult;
using testing::ReadStepLog;
using testing::StepLog;

constexpr int kClasses = 3;
constexpr int kTrainPerClass = 60;
constexpr int kTestPerClass = 20;

// A grey image of class k: a bright bar (k 0: horizontal, 1: vertical, 2:
// diagonal) at a random place on a noisy background, 24 to 32 pixels a side.
std::vector<uint8_t> Draw(int k, std::mt19937& rng, int* w, int* h) {
  *w = std::uniform_int_distribution<int>(24, 32)(rng);
  *h = std::uniform_int_distribution<int>(24, 32)(rng);
  std::vector<uint8_t> px(*w * *h);
  for (auto& p : px) p = static_cast<uint8_t>(std::uniform_int_distribution<int>(0, 60)(rng));
  const int at = std::uniform_int_distribution<int>(4, std::min(*w, *h) - 6)(rng);
  for (int i = 0; i < std::min(*w, *h); ++i) {
    for (int t = 0; t < 3; ++t) {
      const int x = k == 0 ? i : k == 1 ? at + t : std::min(*w - 1, i + t);
      const int y = k == 0 ? at + t : i;
      px[y * *w + x] = 255;
    }
  }
  return px;
}

void WriteImage(const fs::path& path, const std::vector<uint8_t>& px, int w, int h) {
  if (path.extension() == ".png") {
    png_image image{};
    image.version = PNG_IMAGE_VERSION;
    image.width = w;
    image.height = h;
    image.format = PNG_FORMAT_GRAY;
    ASSERT_TRUE(png_image_write_to_file(&image, path.c_str(), 0, px.data(), 0, nullptr));
    return;
  }
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, px.data(), w, 0, h, TJPF_GRAY, &buf, &size, TJSAMP_GRAY, 95, 0), 0);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
}

class DataTest : public testing::E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    std::mt19937 rng(20261202);
    const char* names[kClasses] = {"bars", "columns", "slopes"};
    for (const auto& [split, count] :
         {std::pair{"train", kTrainPerClass}, {"test", kTestPerClass}}) {
      for (int k = 0; k < kClasses; ++k) {
        fs::create_directories(images() / split / names[k]);
        for (int i = 0; i < count; ++i) {
          int w = 0, h = 0;
          std::vector<uint8_t> px = Draw(k, rng, &w, &h);
          WriteImage(
              images() / split / names[k] / fmt::format("{:03}.{}", i, i % 3 ? "png" : "jpg"), px,
              w, h);
        }
      }
    }
  }
  fs::path images() const { return dir_ / "images"; }
  std::string ImageJob(const std::string& name, int64_t steps, const std::string& extra = "") {
    return fmt::format(
        "name: {}\nmodel: cnn\n"
        "dataset:\n  name: images\n  path: {}\n  image_size: 28\n  channels: 1\n"
        "  augment: {{crop_padding: 2, flip: true, brightness: 0.2, contrast: 0.2}}\n"
        "batch_size: 16\nsteps: {}\nseed: 4\nthreads: 1\noptimizer: {{type: adam, lr: 0.002}}\n"
        "checkpoint: {{interval_steps: 5}}\noutput_dir: {}\n{}",
        name, images().string(), steps, (dir_ / name).string(), extra);
  }
  json Summary(const std::string& run) {
    return json::parse(*ReadFile((dir_ / run / "summary.json").string()));
  }
};

// An image folder with augmentation trains (well above chance on three
// classes), and a run killed with SIGKILL resumes bit for bit: the augmented
// batches after the resume are the uninterrupted run's.
TEST_F(DataTest, AnAugmentedImageFolderTrainsAndResumesBitForBit) {
  auto job = [&](const std::string& name) { return WriteJob(name, ImageJob(name, 40)); };
  ProcessResult ref = Train(job("ref"), dir_ / "ref.csv", "ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_NE(ref.err.find("training cnn on images (180 samples"), std::string::npos) << ref.err;
  EXPECT_GT(Summary("ref")["test_accuracy"].get<double>(), 0.8);
  {
    ChildProcess p(TrainArgs(job("cut"), dir_ / "cut.csv"), (dir_ / "cut_a").string());
    while (p.Running() && testing::LastLoggedStep(dir_ / "cut.csv") < 17) ::usleep(500);
    p.Kill(SIGKILL);
    p.Wait();
  }
  ASSERT_LT(testing::LastLoggedStep(dir_ / "cut.csv"), 40) << "killed mid-run";
  ProcessResult resumed = Train(job("cut"), dir_ / "cut.csv", "cut_b");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const StepLog a = ReadStepLog(dir_ / "ref.csv"), b = ReadStepLog(dir_ / "cut.csv");
  ASSERT_EQ(b.size(), 40u);
  for (int64_t s = 1; s <= 40; ++s) EXPECT_EQ(b.at(s), a.at(s)) << "step " << s;

  // Without augmentation the losses differ: it was applied.
  std::string plain = ImageJob("plain", 2);
  plain.replace(plain.find("  augment:"),
                plain.find('\n', plain.find("  augment:")) - plain.find("  augment:") + 1, "");
  ASSERT_EQ(Train(WriteJob("plain", plain), dir_ / "plain.csv", "plain").exit_code, 0);
  EXPECT_NE(ReadStepLog(dir_ / "plain.csv").at(1), a.at(1));
}

// A machine lost mid-run: its replacement starts with an empty local disk,
// resumes from the durable checkpoint tier and reads the decoded images from
// the durable data cache, decoding none of them; the steps after the resume
// are the uninterrupted run's, bit for bit.
TEST_F(DataTest, AReplacementMachineReadsTheDurableDataCacheAndResumesBitForBit) {
  auto job = [&](const std::string& name) {
    std::string y = ImageJob(name, 30);
    const std::string ck = "checkpoint: {interval_steps: 5}";
    y.replace(y.find(ck), ck.size(),
              fmt::format("checkpoint: {{interval_steps: 5, dir: {}, durable_dir: {}}}",
                          (dir_ / name / "machine").string(), (dir_ / name / "durable").string()));
    const std::string ch = "  channels: 1\n";
    y.insert(y.find(ch) + ch.size(), "  cache: {shard_size: 50}\n");
    return WriteJob(name, y);
  };
  ProcessResult ref = Train(job("dref"), dir_ / "dref.csv", "dref");
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_NE(ref.err.find("train split, 4 shards: 0 memory, 0 local, 0 durable, 4 decoded"),
            std::string::npos)
      << ref.err;
  {
    ChildProcess p(TrainArgs(job("lost"), dir_ / "lost.csv"), (dir_ / "lost_a").string());
    while (p.Running() && testing::LastLoggedStep(dir_ / "lost.csv") < 14) ::usleep(500);
    p.Kill(SIGKILL);
    p.Wait();
  }
  ASSERT_LT(testing::LastLoggedStep(dir_ / "lost.csv"), 30) << "killed mid-run";
  fs::remove_all(dir_ / "lost" / "machine");  // the machine and its disk are gone
  ProcessResult resumed = Train(job("lost"), dir_ / "lost.csv", "lost_b");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("train split, 4 shards: 0 memory, 0 local, 4 durable, 0 decoded"),
            std::string::npos)
      << resumed.err;
  EXPECT_NE(resumed.err.find("test split, 2 shards: 0 memory, 0 local, 2 durable, 0 decoded"),
            std::string::npos)
      << resumed.err;
  const StepLog a = ReadStepLog(dir_ / "dref.csv"), b = ReadStepLog(dir_ / "lost.csv");
  ASSERT_EQ(b.size(), 30u);
  for (int64_t s = 1; s <= 30; ++s) EXPECT_EQ(b.at(s), a.at(s)) << "step " << s;
}

// Two elastic workers holding their own shards, both killed with SIGKILL and
// started again, resume bit for bit: the order (dealt from the shards' slots)
// and the owners (from the workers' ids) are the same after the resume.
TEST_F(DataTest, TwoWorkersHoldingTheirOwnShardsResumeBitForBit) {
  auto job = [&](const std::string& name) {
    std::string y = ImageJob(name, 30, "distributed: {max_workers: 2, join_window_s: 60}\n");
    const std::string ch = "  channels: 1\n";
    y.insert(y.find(ch) + ch.size(), "  cache: {shard_size: 12, hold: own}\n");
    return WriteJob(name, y);
  };
  auto args = [&](const std::string& name, const std::string& logs) {
    return std::vector<std::string>{SPOT_BIN,
                                    "train",
                                    job(name).string(),
                                    "--nproc",
                                    "2",
                                    "--plain",
                                    "--step-log",
                                    (dir_ / (name + ".csv")).string(),
                                    "--log-dir",
                                    (dir_ / logs).string()};
  };
  ProcessResult ref = testing::RunProcess(args("oref", "oref_logs"), (dir_ / "oref").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  {
    ChildProcess p(args("ocut", "ocut_logs_a"), (dir_ / "ocut_a").string());
    while (p.Running() && testing::LastLoggedStep(dir_ / "ocut.csv") < 14) ::usleep(500);
    for (const auto& e :
         testing::ReadEvents(testing::FilesEndingWith(dir_ / "ocut_logs_a", ".events.jsonl"))) {
      ::kill(e["pid"].get<int>(), SIGKILL);  // both workers at once
    }
    p.Wait(60);
  }
  ASSERT_LT(testing::LastLoggedStep(dir_ / "ocut.csv"), 30) << "killed mid-run";
  ProcessResult resumed =
      testing::RunProcess(args("ocut", "ocut_logs_b"), (dir_ / "ocut_b").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from checkpoint"), std::string::npos) << resumed.err;
  const StepLog a = ReadStepLog(dir_ / "oref.csv"), b = ReadStepLog(dir_ / "ocut.csv");
  ASSERT_EQ(a.size(), 30u);
  ASSERT_EQ(b.size(), 30u);
  for (int64_t s = 1; s <= 30; ++s) EXPECT_EQ(b.at(s), a.at(s)) << "step " << s;
}

// Three elastic workers on the image folder; one is killed with SIGKILL and
// another joins: every sample of every epoch is trained on exactly once. The
// images are held in 15 shards, each by one worker (rendezvous hashing of the
// workers' ids with bounded loads): a worker trains only on its own shards'
// samples, in parts no larger than its share, the kill moves about the lost
// worker's shards to the survivors, and the join gives the newcomer its share
// (the others load at most a few).
TEST_F(DataTest, ThreeWorkersOnAnImageFolderUseEverySampleOnceThroughAKillAndAJoin) {
  std::string y = ImageJob("el", 60,
                           "distributed: {max_workers: 3, join_window_s: 60, liveness_ttl_s: 2, "
                           "collective_timeout_s: 5}\n");
  const std::string ch = "  channels: 1\n";
  y.insert(y.find(ch) + ch.size(), "  cache: {shard_size: 12, hold: own}\n");
  const fs::path job = WriteJob("el", y);
  ChildProcess store({SPOT_BIN, "rendezvous", "--port", "0"}, (dir_ / "store").string());
  const std::string url = testing::StartRendezvous(store, dir_ / "store.out");
  ASSERT_FALSE(url.empty()) << "spot rendezvous did not start";
  const fs::path steps = dir_ / "steps.csv";
  auto worker = [&](const std::string& id) {
    return std::vector<std::string>{SPOT_BIN,
                                    "worker",
                                    job.string(),
                                    "--rendezvous",
                                    url,
                                    "--id",
                                    id,
                                    "--threads",
                                    "1",
                                    "--step-log",
                                    steps.string(),
                                    "--slowdown",
                                    "2",
                                    "--sample-log",
                                    (dir_ / (id + ".samples.csv")).string()};
  };
  std::vector<std::unique_ptr<ChildProcess>> ws;
  for (const char* id : {"a", "b", "c"}) {
    ws.push_back(std::make_unique<ChildProcess>(worker(id), (dir_ / id).string()));
  }
  while (testing::LastLoggedStep(steps) < 15) ::usleep(2000);
  ws[1]->Kill(SIGKILL);
  std::map<std::string, ProcessResult> done;
  done["b"] = ws[1]->Wait();
  EXPECT_EQ(done["b"].term_signal, SIGKILL);
  while (testing::LastLoggedStep(steps) < 25) ::usleep(2000);
  ws.push_back(std::make_unique<ChildProcess>(worker("d"), (dir_ / "d").string()));
  for (auto [i, id] : {std::pair{0, "a"}, {2, "c"}, {3, "d"}}) {
    done[id] = ws[i]->Wait(300);
    EXPECT_EQ(done[id].exit_code, 0) << "signal " << done[id].term_signal << "\n" << done[id].err;
    // Nothing read from another worker's shards.
    EXPECT_NE(done[id].out.find(", 0 on demand"), std::string::npos) << done[id].out;
  }
  // Each worker's shard lines: generation -> {shards, slots, world, held already, loaded}.
  struct Held {
    int64_t owned = 0, slots = 0, world = 0, held = 0, loaded = 0;
  };
  std::map<std::string, std::map<int64_t, Held>> lines;
  const std::regex line(
      R"(generation (\d+): data shards: (\d+) of 15 \((\d+) of 15 slots\) are rank \d+ of (\d+)'s; (\d+) held already, (\d+) loaded)");
  for (const auto& [id, r] : done) {
    for (std::sregex_iterator m(r.err.begin(), r.err.end(), line), end; m != end; ++m) {
      auto at = [&](int k) {  // the regex matched digits: no error to handle
        int64_t v = 0;
        const std::string text = (*m)[k].str();
        std::from_chars(text.data(), text.data() + text.size(), v);
        return v;
      };
      lines[id][at(1)] = {at(2), at(3), at(4), at(5), at(6)};
    }
  }
  // Every generation whose members all logged their shards: each shard and
  // slot had one owner, and no member more than its share of the slots.
  struct Gen {
    int64_t members = 0, world = 0, shards = 0, slots = 0, most = 0;
  };
  std::map<int64_t, Gen> gens;
  for (const auto& [id, by_gen] : lines) {
    for (const auto& [g, h] : by_gen) {
      Gen& x = gens[g];
      ++x.members;
      x.world = h.world;
      x.shards += h.owned;
      x.slots += h.slots;
      x.most = std::max(x.most, h.slots);
    }
  }
  int whole = 0;
  for (const auto& [g, x] : gens) {
    if (x.members != x.world) continue;
    ++whole;
    EXPECT_EQ(x.shards, 15) << "generation " << g;
    EXPECT_EQ(x.slots, 15) << "generation " << g;
    EXPECT_EQ(x.most, (15 + x.world - 1) / x.world) << "generation " << g;
  }
  EXPECT_GE(whole, 3) << "three, then two, then three again";
  // The survivors take over about the lost worker's shards, not the set; at
  // the join the newcomer loads its own and the others next to nothing.
  int64_t b_owned = -1;
  for (const auto& [g, h] : lines["b"]) b_owned = h.owned;
  ASSERT_GT(b_owned, 0);
  int64_t taken_over = 0, loaded_at_join = 0;
  for (const char* id : {"a", "c"}) {
    const Held* before = nullptr;
    for (const auto& [g, h] : lines[id]) {
      if (before != nullptr && h.world < before->world) taken_over += h.loaded;
      if (before != nullptr && h.world > before->world) loaded_at_join += h.loaded;
      before = &h;
    }
  }
  EXPECT_GE(taken_over, b_owned);
  EXPECT_LE(taken_over, b_owned + 4) << "the survivors reloaded more than the lost worker's shards";
  ASSERT_FALSE(lines["d"].empty());
  const Held& d = lines["d"].begin()->second;
  EXPECT_EQ(d.held, 0);
  EXPECT_EQ(d.loaded, d.owned);
  EXPECT_LE(loaded_at_join, 4) << "a join made the others load shards";
  std::cout << "shards: b held " << b_owned << ", the survivors took over " << taken_over
            << "; d joined with " << d.owned << ", the others loaded " << loaded_at_join << "\n";
  testing::ExpectEverySampleOnce(
      testing::ReadSampleLogs(testing::FilesEndingWith(dir_, ".samples.csv")),
      kClasses * kTrainPerClass, 60, 1);
  std::set<int64_t> worlds;
  int64_t dealt = 0;
  for (const auto& r : testing::ReadSampleLogs(testing::FilesEndingWith(dir_, ".samples.csv"))) {
    worlds.insert(r.world);
    // The 15 slots (a shard of 12 images each) deal round robin: a batch of
    // 16 holds one sample of every slot and a second of one, so a part is at
    // most its rank's share of the slots and one.
    ++dealt;
    EXPECT_LE(r.end - r.begin, (15 + r.world - 1) / r.world + 1)
        << "step " << r.step << ", rank " << r.rank << " of " << r.world;
  }
  EXPECT_GT(dealt, 60);
  EXPECT_TRUE(worlds.count(3) && worlds.count(2)) << "three, then two, then three again";
  store.Kill(SIGTERM);
  store.Wait(30);
}

TEST_F(DataTest, BadImageFoldersAreClearErrors) {
  const fs::path job = WriteJob("bad", ImageJob("bad", 2));
  const fs::path victim = images() / "train" / "columns" / "004.png";
  const std::string bytes = *ReadFile(victim.string());
  std::ofstream(victim, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  ProcessResult cut = Train(job, "", "cut");
  EXPECT_EQ(cut.exit_code, 2);
  EXPECT_NE(cut.err.find(victim.string() + ": "), std::string::npos) << cut.err;
  EXPECT_NE(cut.err.find("PNG image"), std::string::npos) << cut.err;
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "checkpoints")) << "nothing written for bad data";

  std::ofstream(images() / "train" / "columns" / "README.txt") << "not an image";
  ProcessResult stray = Train(job, "", "stray");
  EXPECT_EQ(stray.exit_code, 2);
  EXPECT_NE(stray.err.find("README.txt: not a .png, .jpg or .jpeg image"), std::string::npos)
      << stray.err;

  fs::rename(images() / "test", images() / "elsewhere");
  ProcessResult no_test = Train(job, "", "no_test");
  EXPECT_EQ(no_test.exit_code, 2);
  EXPECT_NE(no_test.err.find("dataset.path: " + images().string() + ": no test/ (or val/)"),
            std::string::npos)
      << no_test.err;
}

// A CSV table (two Gaussian blobs per class in 4 features) trained by an MLP
// scripted in Python; a bad record exits 2 naming the file and line.
TEST_F(DataTest, ACsvTableTrainsAScriptedModel) {
  const fs::path data = dir_ / "table";
  fs::create_directories(data);
  std::mt19937 rng(7);
  std::normal_distribution<float> noise(0, 0.4f);
  for (const auto& [file, rows] : {std::pair{"train.csv", 300}, {"test.csv", 90}}) {
    std::ofstream f(data / file);
    f << "sepal,\"petal, width\",species,x4\n";
    for (int i = 0; i < rows; ++i) {
      const int k = i % 3;
      f << fmt::format("{},{},{},{}\n", k + noise(rng), 2 * k - 1 + noise(rng), k, noise(rng));
    }
  }
  const fs::path script = dir_ / "mlp.py";
  std::ofstream(script) << "import sys, torch\n"
                           "m = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(),\n"
                           "                        torch.nn.Linear(16, 3))\n"
                           "torch.jit.script(m).save(sys.argv[1])\n";
  ASSERT_EQ(testing::RunProcess({"/usr/bin/python3", script.string(), (dir_ / "mlp.pt").string()},
                                (dir_ / "script").string())
                .exit_code,
            0);
  const std::string job = fmt::format(
      "name: csv\nmodel: {{torchscript: {}}}\ndataset: {{name: csv, path: {}, label: species}}\n"
      "batch_size: 30\nepochs: 10\nseed: 1\nthreads: 1\noptimizer: {{type: adam, lr: 0.01}}\n"
      "output_dir: {}\n",
      (dir_ / "mlp.pt").string(), data.string(), (dir_ / "csv").string());
  ProcessResult r = Train(WriteJob("csv", job), "", "csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(Summary("csv")["test_accuracy"].get<double>(), 0.9);
  std::string balanced = job;
  balanced.replace(balanced.find("label: species}"), 15, "label: species, sampling: balanced}");
  const std::string out = (dir_ / "csv").string();
  balanced.replace(balanced.find(out), out.size(), (dir_ / "balanced").string());
  ProcessResult b = Train(WriteJob("balanced", balanced), "", "balanced");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_GT(Summary("balanced")["test_accuracy"].get<double>(), 0.9);

  std::ofstream(data / "test.csv", std::ios::app) << "1.0,oops,2,0.1\n";
  ProcessResult bad = Train(WriteJob("csv2", job), "", "csv2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find((data / "test.csv").string() + ":92: petal, width is \"oops\""),
            std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace spot
