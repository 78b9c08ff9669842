// S3 durable tier vs the directory tier: write and read throughput of one
// checkpoint-sized blob, S3 being moto's server on loopback (signature checks
// on, so every request is signed and verified as against AWS) and the
// directory a temporary one on the local disk (written through a temporary
// file, fsync and rename). Prints a Markdown table: MB/s per tier and
// operation, median of the repeats, and the S3 / directory ratio, with the
// CPU seconds per GB this process and the S3 server spent (the server is
// Python: its hashing and storing bound the S3 write here, not the client).
// Then a restore from each tier: a checkpoint file (planes-zstd, the default
// for full versions) of as many trained-looking f32 weights opened and
// decoded with CheckpointFile::ReadAll, whose decoding threads read each
// chunk with a ranged GET, against downloading the same file whole.
//
//   build/bin/s3_tier_bench [--mb 256] [--part-mb 16] [--repeats 3]
//
// Needs the project's Python environment (.venv with moto; `make deps`).
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "aws/aws_testing.h"
#include "ckpt/blob_store.h"
#include "ckpt/codec.h"
#include "ckpt/container.h"
#include "ckpt/format.h"
#include "ckpt/s3_blob_store.h"
#include "core/temp_dir.h"

namespace spot::ckpt {
namespace {

struct Args {
  uint64_t mb = 256;
  uint64_t part_mb = 16;
  int repeats = 3;
};

Result<Args> Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (i + 1 >= argc) return InvalidArgumentError(f + ": missing value (see the file's header)");
    const long v = std::strtol(argv[++i], nullptr, 10);
    if (v < 1)
      return InvalidArgumentError(fmt::format("{}: '{}' is not a positive integer", f, argv[i]));
    if (f == "--mb")
      a.mb = v;
    else if (f == "--part-mb")
      a.part_mb = v;
    else if (f == "--repeats")
      a.repeats = static_cast<int>(v);
    else
      return InvalidArgumentError("unknown flag " + f + " (want --mb, --part-mb, --repeats)");
  }
  if (a.part_mb < 5) return InvalidArgumentError("--part-mb: S3 parts are at least 5 MiB");
  return a;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(out.data() + i, &x, std::min<size_t>(8, n - i));
  }
  return out;
}

// CPU seconds (user + system) of process `pid` (0: this one).
double CpuSeconds(int64_t pid) {
  if (pid == 0) {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
           u.ru_stime.tv_usec / 1e6;
  }
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Figures {
  double write_mb_s = 0, read_mb_s = 0;
  double write_cpu_s_gb = 0, read_cpu_s_gb = 0;                // this process
  double server_write_cpu_s_gb = 0, server_read_cpu_s_gb = 0;  // the S3 server
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Medians of `repeats` writes and reads (each read checked); `server`: the
// pid of the process serving the store (0 = none).
Result<Figures> Measure(BlobStore& store, const std::string& data, int repeats, int64_t server) {
  std::vector<double> w, r, wc, rc, ws, rs;
  using Clock = std::chrono::steady_clock;
  const double mb = static_cast<double>(data.size()) / 1e6;
  for (int i = 0; i < repeats; ++i) {
    const std::string name = fmt::format("ckpt-{:06}.bin", i + 1);
    const double c0 = CpuSeconds(0), s0 = server ? CpuSeconds(server) : 0;
    auto t0 = Clock::now();
    SPOT_RETURN_IF_ERROR(store.Put(name, data));
    auto t1 = Clock::now();
    const double c1 = CpuSeconds(0), s1 = server ? CpuSeconds(server) : 0;
    SPOT_ASSIGN_OR_RETURN(std::string back, store.Read(name));
    auto t2 = Clock::now();
    const double c2 = CpuSeconds(0), s2 = server ? CpuSeconds(server) : 0;
    if (back != data) return DataLossError(store.Describe(name) + ": read back different bytes");
    w.push_back(mb / std::chrono::duration<double>(t1 - t0).count());
    r.push_back(mb / std::chrono::duration<double>(t2 - t1).count());
    wc.push_back((c1 - c0) * 1000 / mb);
    rc.push_back((c2 - c1) * 1000 / mb);
    ws.push_back((s1 - s0) * 1000 / mb);
    rs.push_back((s2 - s1) * 1000 / mb);
    SPOT_RETURN_IF_ERROR(store.Delete(name));
  }
  return Figures{Median(w), Median(r), Median(wc), Median(rc), Median(ws), Median(rs)};
}

// Trained-looking weights, normal(0, 0.05), in records of 16M floats (64 MiB).
Container Weights(uint64_t bytes, uint64_t seed) {
  Container c;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0, 0.05f);
  const uint64_t per = uint64_t{16} << 20;
  for (uint64_t done = 0, i = 0; done < bytes / 4; done += per, ++i) {
    const int64_t n = static_cast<int64_t>(std::min(per, bytes / 4 - done));
    std::span<char> d = c.AddUninitialized(fmt::format("w{}", i), DType::kF32, {n});
    for (int64_t k = 0; k < n; ++k) {
      const float v = normal(rng);
      std::memcpy(d.data() + 4 * k, &v, 4);
    }
  }
  return c;
}

struct RestoreFigures {
  double restore_ms = 0;   // CheckpointFile::Open + ReadAll, every core
  double download_ms = 0;  // BlobStore::Read of the same file
  uint64_t file_bytes = 0;
};

// Medians of `repeats` restores and downloads of `state` written to `store`
// as one full version.
Result<RestoreFigures> MeasureRestore(BlobStore& store, Container& state, int repeats) {
  using Clock = std::chrono::steady_clock;
  ChunkCodec codec;
  {
    SPOT_ASSIGN_OR_RETURN(std::unique_ptr<BlobWriter> w, store.Create("restore.bin"));
    SPOT_RETURN_IF_ERROR(
        WriteCheckpointFile(state, CodecPlan{}, nullptr, 1, -1, codec, *w).status());
    SPOT_RETURN_IF_ERROR(w->Commit());
  }
  std::vector<double> restore, download;
  RestoreFigures f;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(CheckpointFile file, CheckpointFile::Open(store, "restore.bin"));
    SPOT_ASSIGN_OR_RETURN(Container back, file.ReadAll(nullptr, codec));
    auto t1 = Clock::now();
    SPOT_ASSIGN_OR_RETURN(std::string bytes, store.Read("restore.bin"));
    auto t2 = Clock::now();
    if (back.records().size() != state.records().size()) {
      return DataLossError(store.Describe("restore.bin") + ": restored a different state");
    }
    for (size_t r = 0; r < back.records().size(); ++r) {
      const auto a = back.records()[r].data, b = state.records()[r].data;
      if (a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size()) != 0) {
        return DataLossError(store.Describe("restore.bin") + ": restored different bytes");
      }
    }
    f.file_bytes = bytes.size();
    restore.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    download.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  SPOT_RETURN_IF_ERROR(store.Delete("restore.bin"));
  f.restore_ms = Median(restore);
  f.download_ms = Median(download);
  return f;
}

int Run(int argc, char** argv) {
  Result<Args> args = Parse(argc, argv);
  if (!args.ok()) {
    std::cerr << "s3_tier_bench: " << args.status().message() << "\n";
    return 2;
  }
  auto tmp = TempDir::Create("spot_s3_bench");
  if (!tmp.ok()) return std::cerr << tmp.status().ToString() << "\n", 1;
  const auto venv = aws::VenvDir(SPOT_SOURCE_DIR);
  if (std::string why = aws::MotoSkipReason(venv); !why.empty()) {
    std::cerr << "s3_tier_bench: SKIPPED: moto is not installed (PyPI was unreachable):\n" << why;
    return 0;
  }
  auto moto = aws::MotoServer::Start({.venv = venv, .log_path = tmp->path() / "moto.log"});
  if (!moto.ok()) return std::cerr << moto.status().ToString() << "\n", 1;
  Status bucket = (*moto)->CreateBucket("bench");
  if (!bucket.ok()) return std::cerr << bucket.ToString() << "\n", 1;
  auto dir = DirectoryBlobStore::Open((tmp->path() / "dir").string());
  auto s3 =
      S3BlobStore::Open("s3://bench/ckpt", (*moto)->Config(), {.part_size = args->part_mb << 20});
  if (!dir.ok() || !s3.ok()) {
    std::cerr << (dir.ok() ? s3.status() : dir.status()).ToString() << "\n";
    return 1;
  }
  const std::string data = RandomBytes(args->mb << 20, 42);
  auto d = Measure(**dir, data, args->repeats, 0);
  auto s = Measure(**s3, data, args->repeats, (*moto)->pid());
  if (!d.ok() || !s.ok()) {
    std::cerr << (d.ok() ? s.status() : d.status()).ToString() << "\n";
    return 1;
  }
  std::cout << fmt::format(
      "S3 tier (moto on loopback, SigV4 checked, {} MiB parts) vs directory tier: one {} MiB "
      "blob, median of {}\n\n",
      args->part_mb, args->mb, args->repeats);
  auto row = [](const char* op, double dir_mb_s, double s3_mb_s, double dir_cpu, double s3_cpu,
                double server_cpu) {
    return fmt::format(
        "| {:9} | {:14.1f} | {:7.1f} | {:13.3f}x | {:14.2f} | {:10.2f} | {:10.2f} |\n", op,
        dir_mb_s, s3_mb_s, s3_mb_s / dir_mb_s, dir_cpu, s3_cpu, server_cpu);
  };
  std::cout
      << "| operation | directory MB/s | S3 MB/s | S3 / directory | CPU s/GB: dir | S3 client "
         "| S3 server  |\n"
         "|-----------|----------------|---------|----------------|----------------|"
         "------------|------------|\n"
      << row("write", d->write_mb_s, s->write_mb_s, d->write_cpu_s_gb, s->write_cpu_s_gb,
             s->server_write_cpu_s_gb)
      << row("read", d->read_mb_s, s->read_mb_s, d->read_cpu_s_gb, s->read_cpu_s_gb,
             s->server_read_cpu_s_gb);
  Container state = Weights(args->mb << 20, 7);
  auto dr = MeasureRestore(**dir, state, args->repeats);
  auto sr = MeasureRestore(**s3, state, args->repeats);
  if (!dr.ok() || !sr.ok()) {
    std::cerr << (dr.ok() ? sr.status() : dr.status()).ToString() << "\n";
    return 1;
  }
  std::cout << fmt::format(
      "\nRestore of a full version ({} MiB of normal(0, 0.05) f32 weights, planes-zstd: a {:.1f} "
      "MB file): CheckpointFile::Open + ReadAll on every core (each chunk read with its own "
      "ReadInto: a ranged GET on S3), against downloading the file whole (BlobStore::Read), "
      "median of {}\n\n",
      args->mb, static_cast<double>(sr->file_bytes) / 1e6, args->repeats);
  auto rrow = [](const char* tier, const RestoreFigures& f) {
    return fmt::format("| {:9} | {:10.1f} | {:11.1f} | {:18.2f}x |\n", tier, f.restore_ms,
                       f.download_ms, f.restore_ms / f.download_ms);
  };
  std::cout << "| tier      | restore ms | download ms | restore / download |\n"
               "|-----------|------------|-------------|--------------------|\n"
            << rrow("directory", *dr) << rrow("S3", *sr);
  return 0;
}

}  // namespace
}  // namespace spot::ckpt

int main(int argc, char** argv) { return spot::ckpt::Run(argc, argv); }
