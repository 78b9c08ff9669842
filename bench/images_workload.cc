#include "images_workload.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "bench_process.h"
#include "core/file_io.h"
#include "cpu_load.h"
#include "report.h"
#include "train/folder_data.h"
#include "train/partition.h"
#include "train/sampler.h"

namespace spot::bench {
namespace {

namespace fs = std::filesystem;

// Smooth gradients with noise: compress like photographs more than flat colour does.
Status WriteImages(const ImagesBenchOptions& o, const fs::path& root) {
  std::mt19937 rng(1);
  const int side = static_cast<int>(o.side);
  std::vector<uint8_t> px(static_cast<size_t>(side) * side * 3);
  tjhandle tj = tjInitCompress();
  for (int64_t i = 0; i < o.images; ++i) {
    const fs::path dir = root / "train" / fmt::format("class{}", i % 4);
    fs::create_directories(dir);
    for (size_t p = 0; p < px.size(); ++p) {
      px[p] = static_cast<uint8_t>((p / 3 % side) * 2 + (i * 7) % 50 + rng() % 40);
    }
    const fs::path file = dir / fmt::format("{:05}.{}", i, i % 2 ? "png" : "jpg");
    if (i % 2) {
      png_image image{};
      image.version = PNG_IMAGE_VERSION;
      image.width = side;
      image.height = side;
      image.format = PNG_FORMAT_RGB;
      if (!png_image_write_to_file(&image, file.c_str(), 0, px.data(), 0, nullptr)) {
        tjDestroy(tj);
        return InternalError("cannot write " + file.string());
      }
      continue;
    }
    unsigned char* buf = nullptr;
    unsigned long size = 0;
    tjCompress2(tj, px.data(), side, 0, side, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0);
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<char*>(buf), size);
    tjFree(buf);
  }
  tjDestroy(tj);
  fs::create_directories(root / "test" / "class0");
  fs::copy_file(root / "train" / "class0" / "00000.jpg", root / "test" / "class0" / "0.jpg");
  return Status::Ok();
}

// Writes `job` as <dir>/job.yaml and runs `spot train` on it on a quiet
// machine: its wall seconds, or -1 when it fails.
double RunJob(const ImagesBenchOptions& o, const fs::path& dir, const std::string& job,
              const std::vector<std::string>& extra = {}) {
  fs::create_directories(dir);
  const std::string file = (dir / "job.yaml").string();
  if (!WriteFileAtomically(file, job).ok()) return -1;
  WaitForQuiet(0.25, 60);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> argv = {o.spot_bin, "train", file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  Proc p(argv, (dir / "log.txt").string());
  if (!p.started() || p.Wait(600) != 0) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds `spot train` takes for one step of a small CNN on the folder
// (process start, loading both splits, the model, the step, the exit), the
// job's cache as given; -1 when it fails.
double TimeToFirstStep(const ImagesBenchOptions& o, const fs::path& root, const std::string& cache,
                       const fs::path& local, const fs::path& durable, int index) {
  const fs::path dir = fs::path(o.work_dir) / "images-jobs" / std::to_string(index);
  return RunJob(
      o, dir,
      fmt::format(
          "name: cache{}\nmodel: cnn\n"
          "dataset: {{name: images, path: {}, image_size: 28, channels: 1, cache: {}}}\n"
          "batch_size: 64\nsteps: 1\nseed: 1\nthreads: 2\nresume: never\n"
          "optimizer: {{type: adam, lr: 0.001}}\n"
          "checkpoint: {{dir: {}, durable_dir: {}, interval: steps, interval_steps: 1000}}\n"
          "output_dir: {}\n",
          index, root.string(), cache, local.string(), durable.string(), dir.string()));
}

// Training samples/s of `spot train` on the folder (CNN, augmentation, 150
// steps) with dataset.prefetch and intra-op threads as given; -1 when it fails.
double PrefetchRate(const ImagesBenchOptions& o, const fs::path& root, bool prefetch, int threads,
                    int index) {
  const fs::path dir = fs::path(o.work_dir) / "images-prefetch" / std::to_string(index);
  const double s = RunJob(
      o, dir,
      fmt::format("name: prefetch{}\nmodel: cnn\n"
                  "dataset: {{name: images, path: {}, image_size: 28, channels: 1, prefetch: {},\n"
                  "  augment: {{crop_padding: 2, flip: true, brightness: 0.2, contrast: 0.2}}}}\n"
                  "batch_size: 64\nsteps: 150\nseed: 1\nthreads: {}\nresume: never\n"
                  "optimizer: {{type: adam, lr: 0.001}}\n"
                  "checkpoint: {{interval: steps, interval_steps: 1000}}\noutput_dir: {}\n",
                  index, root.string(), prefetch, threads, dir.string()));
  if (s < 0) return -1;
  Result<std::string> summary = ReadFile((dir / "summary.json").string());
  if (!summary.ok()) return -1;
  auto j = nlohmann::json::parse(*summary, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j.value("train_samples_per_s", -1.0) : -1;
}

// dataset.prefetch on and off, alternating, on 1 and on 2 intra-op threads;
// median of `repeats` each.
std::string PrefetchTable(const ImagesBenchOptions& o, const fs::path& root) {
  if (o.spot_bin.empty()) return "";
  Table table({"threads", "prefetch off samples/s", "prefetch on samples/s", "on vs off"});
  std::string raw;
  int index = 0;
  for (int threads : {1, 2}) {
    std::vector<double> on, off;
    for (int r = 0; r < o.repeats; ++r) {
      Progress(fmt::format("images: prefetch on and off, {} thread(s), round {} of {}", threads,
                           r + 1, o.repeats));
      off.push_back(PrefetchRate(o, root, false, threads, index++));
      on.push_back(PrefetchRate(o, root, true, threads, index++));
    }
    table.AddRow({fmt::format("{}", threads), fmt::format("{:.0f}", Median(off)),
                  fmt::format("{:.0f}", Median(on)),
                  fmt::format("{:.2f}x", Median(on) / Median(off))});
    raw += fmt::format("- {} thread(s): off {}; on {}\n", threads, FormatList(off), FormatList(on));
  }
  return fmt::format(
      "### Batch prefetch (dataset.prefetch)\n\n`spot train` of the CNN on the same folder "
      "(image_size 28, grey, augmentation: crop, flip, brightness, contrast; batch 64, 150 "
      "steps) on 1 and 2 intra-op threads, training samples/s from its summary; the prefetch "
      "thread is one more. Runs alternate, median of {} each.\n\n{}\nAll runs (samples/s):\n{}",
      o.repeats, table.ToMarkdown(), raw);
}

// The folder as the cache and shard tables load it: 28 x 28, grey.
train::TrainSpec GreySpec(const fs::path& root) {
  train::TrainSpec spec;
  spec.dataset = "images";
  spec.dataset_path = root.string();
  spec.image_size = 28;
  spec.channels = 1;
  return spec;
}

// The cache table: each case's load of the train split (in this process) and
// time to the first step (a `spot train` process), median of `repeats`.
Result<std::string> CacheTable(const ImagesBenchOptions& o, const fs::path& root) {
  train::TrainSpec spec = GreySpec(root);
  at::set_num_threads(2);
  struct Case {
    const char* name;
    bool cache, clear_local, clear_durable;
  };
  const Case cases[] = {{"no cache (decode every file)", false, false, false},
                        {"cold cache (decode, then store)", true, true, true},
                        {"replacement worker (warm durable, empty local)", true, true, false},
                        {"restart (warm local)", true, false, false}};
  const fs::path local = fs::path(o.work_dir) / "cache-local";
  const fs::path durable = fs::path(o.work_dir) / "cache-durable";
  Table table({"case", "load s", "vs no cache", "first step s", "vs no cache"});
  double base_load = 0, base_step = 0;
  std::string raw;
  int index = 0;
  for (const Case& c : cases) {
    Progress(fmt::format("images: {}", c.name));
    std::vector<double> loads, steps;
    for (int r = 0; r < o.repeats; ++r) {
      for (int pass = 0; pass < 2; ++pass) {  // 0: load in this process, 1: spot train
        std::error_code ec;
        if (c.clear_local) fs::remove_all(local, ec);
        if (c.clear_durable) fs::remove_all(durable, ec);
        if (pass == 1) {
          if (o.spot_bin.empty()) continue;
          steps.push_back(TimeToFirstStep(o, root, c.cache ? "true" : "false", local / "ckpt",
                                          durable, index++));
          continue;
        }
        spec.cache.enabled = c.cache;
        spec.checkpoint.dir = (local / "ckpt").string();
        spec.checkpoint.durable_dir = durable.string();
        WaitForQuiet(0.25, 60);
        const auto t0 = std::chrono::steady_clock::now();
        SPOT_ASSIGN_OR_RETURN(train::TensorSet set,
                              train::LoadImageFolderSplit(spec, train::Split::kTrain));
        loads.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    const double load = Median(loads);
    const double step = steps.empty() ? 0 : Median(steps);
    if (!c.cache) base_load = load, base_step = step;
    table.AddRow({c.name, fmt::format("{:.3f}", load), fmt::format("{:.2f}x", load / base_load),
                  steps.empty() ? "-" : fmt::format("{:.2f}", step),
                  steps.empty() ? "-" : fmt::format("{:.2f}x", step / base_step)});
    raw += fmt::format("- {}: load [{:.3f}]; first step [{:.2f}]\n", c.name, fmt::join(loads, ", "),
                       fmt::join(steps, ", "));
  }
  return fmt::format(
      "### The data cache (dataset.cache): a replacement worker's load and first step\n\n"
      "The same folder at image_size 28, grey, 2 threads. Load: train::LoadImageFolderSplit of "
      "the train split in this process. First step: `spot train` of a CNN for one step "
      "(process start, both splits, model, step, exit). Cold: local and durable tiers emptied "
      "first; replacement: local emptied, durable warm; restart: both warm. Median of {} "
      "each.\n\n{}\nAll runs (seconds):\n{}",
      o.repeats, table.ToMarkdown(), raw);
}

// Elastic workers holding the folder shard by shard (train::ImageShards,
// owners by train::ShardOwners) against every worker loading it whole, and
// the parts' sizes a step waits for.
Result<std::string> ShardTable(const ImagesBenchOptions& o, const fs::path& root) {
  train::TrainSpec spec = GreySpec(root);
  spec.cache.shard_size = 32;
  const fs::path local = fs::path(o.work_dir) / "shards-local";
  const fs::path durable = fs::path(o.work_dir) / "shards-durable";
  spec.checkpoint.dir = (local / "ckpt").string();
  spec.checkpoint.durable_dir = durable.string();
  at::set_num_threads(2);
  auto members = [](int w, int first = 0) {
    std::vector<std::string> ids;
    for (int i = first; i < first + w; ++i) ids.push_back(fmt::format("worker-{}", i));
    return ids;
  };
  Table table({"workers", "shards held by rank 0", "rank 0's load s (decode)", "vs whole",
               "moved when one leaves", "moved when one joins"});
  std::string raw;
  double whole = 0;
  for (int w : {1, 2, 4, 8}) {
    Progress(fmt::format("images: shards, {} workers", w));
    std::vector<double> loads;
    int64_t held = 0, shards = 0;
    for (int r = 0; r < o.repeats; ++r) {
      std::error_code ec;
      fs::remove_all(local, ec);
      fs::remove_all(durable, ec);
      train::ClearDataCacheMemory();
      SPOT_ASSIGN_OR_RETURN(std::shared_ptr<train::ImageShards> set,
                            train::ImageShards::Open(spec, train::Split::kTrain));
      shards = set->shards();
      const std::vector<int32_t> owners =
          train::ShardOwners(shards, train::ShardSlots(shards, 64), members(w));
      std::vector<int64_t> mine;
      for (int64_t s = 0; s < shards; ++s) {
        if (owners[static_cast<size_t>(s)] == 0) mine.push_back(s);
      }
      held = static_cast<int64_t>(mine.size());
      WaitForQuiet(0.25, 60);
      const auto t0 = std::chrono::steady_clock::now();
      SPOT_RETURN_IF_ERROR(set->Load(mine));
      loads.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double load = Median(loads);
    if (w == 1) whole = load;
    // Moves: the last member leaves; a new member joins.
    auto moved = [&](const std::vector<std::string>& from, const std::vector<std::string>& to) {
      const int64_t slots = train::ShardSlots(shards, 64);
      const std::vector<int32_t> a = train::ShardOwners(shards, slots, from);
      const std::vector<int32_t> b = train::ShardOwners(shards, slots, to);
      int64_t n = 0;
      for (int64_t s = 0; s < shards; ++s) n += from[a[s]] != to[b[s]];
      return n;
    };
    const std::string leave =
        w > 1 ? fmt::format("{} of {}", moved(members(w), members(w - 1)), shards) : "-";
    table.AddRow({fmt::format("{}", w), fmt::format("{} of {}", held, shards),
                  fmt::format("{:.3f}", load), fmt::format("{:.2f}x", load / whole), leave,
                  fmt::format("{} of {}", moved(members(w), members(w + 1)), shards)});
    raw += fmt::format("- {} worker(s): {}\n", w, FormatList(loads, 3));
  }
  // The price: parts sized by each batch's draw of shards instead of
  // equally; with the epoch's order a plain shuffle (EpochOrder), and dealt
  // from the slots (SlotOrder, what hold: own trains on). This folder, and a
  // data set of a million samples in shards of 256.
  Table parts({"samples", "shards", "batch", "workers", "plain shuffle: mean", "worst",
               "slots dealt: mean", "worst"});
  for (const auto& [n, shard, epochs] :
       {std::tuple<int64_t, int64_t, int64_t>{o.images, 32, 20}, {1000000, 256, 1}}) {
    for (int64_t b : {64, 256}) {
      for (int w : {2, 4, 8}) {
        const int64_t shards = (n + shard - 1) / shard;
        const int64_t slots = train::ShardSlots(shards, b);
        const std::vector<int32_t> owners = train::ShardOwners(shards, slots, members(w));
        std::vector<std::string> row = {fmt::format("{}", n), fmt::format("{}", shards),
                                        fmt::format("{}", b), fmt::format("{}", w)};
        for (bool dealt : {false, true}) {
          double sum = 0, worst = 0;
          int64_t steps = 0;
          for (int64_t epoch = 0; epoch < epochs; ++epoch) {
            const std::vector<int64_t> order = dealt ? train::SlotOrder(1, epoch, n, shard, slots)
                                                     : train::EpochOrder(1, epoch, n);
            for (int64_t begin = 0; begin + b <= n; begin += b) {
              std::vector<int64_t> count(static_cast<size_t>(w), 0);
              for (int64_t p = begin; p < begin + b; ++p) ++count[owners[order[p] / shard]];
              const double equal = std::ceil(static_cast<double>(b) / w);
              const double ratio =
                  static_cast<double>(*std::max_element(count.begin(), count.end())) / equal;
              sum += ratio;
              worst = std::max(worst, ratio);
              ++steps;
            }
          }
          row.push_back(fmt::format("{:.2f}x", sum / static_cast<double>(steps)));
          row.push_back(fmt::format("{:.2f}x", worst));
        }
        parts.AddRow(row);
      }
    }
  }
  // A whole run: two workers (`spot train --nproc 2`) from fresh caches, so
  // each decodes what it holds, then trains; alternating, median of repeats.
  std::string runs;
  if (!o.spot_bin.empty()) {
    Table run({"hold", "wall s (2 workers, 4 epochs)", "vs whole"});
    std::map<std::string, std::vector<double>> walls;
    int index = 0;
    for (int r = 0; r < o.repeats; ++r) {
      for (const char* hold : {"whole", "own"}) {
        Progress(fmt::format("images: 2 workers, hold {}, round {} of {}", hold, r + 1, o.repeats));
        const fs::path dir = fs::path(o.work_dir) / "images-hold" / std::to_string(index++);
        walls[hold].push_back(RunJob(
            o, dir,
            fmt::format("name: hold{}\nmodel: cnn\n"
                        "dataset: {{name: images, path: {}, image_size: 28, channels: 1,\n"
                        "  cache: {{shard_size: 16, hold: {}}}}}\n"
                        "batch_size: 64\nepochs: 4\nseed: 1\nthreads: 1\nresume: never\n"
                        "optimizer: {{type: adam, lr: 0.001}}\n"
                        "checkpoint: {{interval: steps, interval_steps: 100000}}\n"
                        "distributed: {{max_workers: 2, join_window_s: 60}}\noutput_dir: {}\n",
                        index, root.string(), hold, dir.string()),
            {"--nproc", "2", "--plain"}));
      }
    }
    for (const char* hold : {"whole", "own"}) {
      run.AddRow({hold, fmt::format("{:.2f}", Median(walls[hold])),
                  fmt::format("{:.2f}x", Median(walls[hold]) / Median(walls["whole"]))});
    }
    runs = fmt::format(
        "\nA whole run: `spot train --nproc 2` (one thread each) of the CNN on the folder, "
        "shards of 16 (125, in 64 slots), batch 64, 4 epochs (125 steps), fresh caches (each "
        "worker decodes what it holds, then trains). Alternating, median of {}; all runs: "
        "whole {}, own {}.\n\n{}",
        o.repeats, FormatList(walls["whole"], 2), FormatList(walls["own"], 2), run.ToMarkdown());
  }
  return fmt::format(
             "### Elastic workers holding the folder in shards\n\n"
             "The same folder at image_size 28, grey, shards of 32 images, 2 threads. Rank 0 of W "
             "workers (ids worker-0..W-1) loads the shards it owns (train::ShardOwners: the "
             "shards' "
             "slots for batches of 64, rendezvous hashing with bounded loads), decoding them "
             "(local "
             "and durable tiers emptied first); the anchor is one worker loading the whole set, "
             "what "
             "every worker does with hold: whole. Median of {} each. \"Moved\": shards whose owner "
             "changes when worker-(W-1) leaves, or worker-W joins.\n\n{}\nAll loads "
             "(seconds):\n{}\n"
             "The price of training each rank on its own shards: a step's parts follow the batch's "
             "draw of shards instead of being equal, and the step waits for the largest. Each "
             "batch's largest part against the equal split's (ceil(B/W)), over 20 epochs of this "
             "folder and one of a million samples (seed 1; the members as above, the owners of "
             "the slots for that batch size): with the epoch's order a plain shuffle, and dealt "
             "from the slots as hold: own trains (each slot's samples spread evenly over the "
             "epoch). The step's compute grows by about the ratio when compute dominates.\n\n{}",
             o.repeats, table.ToMarkdown(), raw, parts.ToMarkdown()) +
         runs;
}

}  // namespace

Result<std::string> RunImagesWorkload(const ImagesBenchOptions& o) {
  const fs::path root = fs::path(o.work_dir) / "images";
  Progress(fmt::format("images: writing {} images of {}x{}", o.images, o.side, o.side));
  SPOT_RETURN_IF_ERROR(WriteImages(o, root));
  train::TrainSpec spec;
  spec.dataset = "images";
  spec.dataset_path = root.string();
  spec.image_size = 32;
  spec.channels = 3;
  spec.cache.enabled = false;  // decoding itself
  Table table({"threads", "images/s", "load s", "vs 1 thread"});
  double one = 0;
  std::string raw;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    std::vector<double> rates;
    for (int r = 0; r < o.repeats; ++r) {
      WaitForQuiet(0.25, 60);
      const auto t0 = std::chrono::steady_clock::now();
      SPOT_ASSIGN_OR_RETURN(train::TensorSet set,
                            train::LoadImageFolderSplit(spec, train::Split::kTrain));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rates.push_back(static_cast<double>(set.size()) / s);
    }
    const double rate = Median(rates);
    if (threads == 1) one = rate;
    table.AddRow({fmt::format("{}", threads), fmt::format("{:.0f}", rate),
                  fmt::format("{:.2f}", static_cast<double>(o.images) / rate),
                  fmt::format("{:.2f}x", rate / one)});
    raw += fmt::format("- {} thread(s): {}\n", threads, FormatList(rates));
  }
  SPOT_ASSIGN_OR_RETURN(std::string cache, CacheTable(o, root));
  SPOT_ASSIGN_OR_RETURN(std::string shards, ShardTable(o, root));
  cache += "\n" + shards + "\n" + PrefetchTable(o, root);
  return fmt::format(
      "## images: decoding an image folder (dataset: images)\n\n"
      "{} images of {}x{} RGB (half PNG, half JPEG quality 90) loaded with "
      "train::LoadImageFolderSplit: read, decoded (libpng, libjpeg-turbo), resized to 32x32 "
      "(bilinear), on 1 and 2 intra-op threads; median of {} loads each.\n\n{}\nAll loads "
      "(images/s):\n{}\n{}",
      o.images, o.side, o.side, o.repeats, table.ToMarkdown(), raw, cache);
}

}  // namespace spot::bench
