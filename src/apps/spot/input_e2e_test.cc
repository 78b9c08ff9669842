// End-to-end tests of bad input files (issue 20): the real `spot` binary given
// a directory, a FIFO or a device where a file belongs, malformed job files
// and traces, and numbers out of range. Each is refused at once with exit 2
// and a message naming the file and the reason; none aborts, hangs or spins.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "apps/spot/e2e_support.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;

// Every refusal here happens before any work: a generous limit that still
// turns a hang or a spin into a failure rather than a stuck test run.
constexpr double kTimeoutS = 60;

class InputTest : public E2eTest {
 protected:
  ProcessResult Run(std::vector<std::string> args, const std::string& tag) {
    args.insert(args.begin(), SPOT_BIN);
    return RunProcess(args, (dir_ / tag).string(), kTimeoutS);
  }
  // Exit 2 (bad input, not a crash, not a timeout) and every piece in stderr.
  void ExpectRefused(const ProcessResult& r, const std::vector<std::string>& pieces,
                     const std::string& what) {
    EXPECT_EQ(r.term_signal, 0) << what << ": killed by signal " << r.term_signal << "\n" << r.err;
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << r.err;
    for (const std::string& p : pieces) {
      EXPECT_NE(r.err.find(p), std::string::npos) << what << ": no '" << p << "' in\n" << r.err;
    }
  }
  fs::path WriteFile(const std::string& name, const std::string& bytes) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // A `spot run` job over `traces`, with `market_extra` in its market section.
  std::string RunYaml(const std::string& traces, const std::string& market_extra) {
    return fmt::format(
        "name: input\ncompute_hours: 0.3\ndeadline_hours: 3\n"
        "market:\n  traces: [{}]\n  when_missing: error\n{}"
        "train:\n  model: mlp\n  batch_size: 32\n  steps: 10\n"
        "  optimizer: {{type: adam}}\n  output_dir: {}\n",
        traces, market_extra, (dir_ / "out").string());
  }
};

// A directory where a file belongs once aborted with std::bad_alloc (ext4
// reports a directory's lseek(SEEK_END) as 2^63 - 1, which sized the read
// buffer); a FIFO hung in open; /dev/zero never ended.
TEST_F(InputTest, OnlyRegularFilesAreRead) {
  const std::string dir = (dir_ / "a-directory").string();
  fs::create_directories(dir);
  const std::string fifo = (dir_ / "fifo.yaml").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string is_dir = dir + ": is a directory, expected a regular file";
  const struct {
    std::vector<std::string> args;
    std::string expected;
  } cases[] = {
      {{"train", dir}, is_dir},
      {{"run", dir}, is_dir},
      {{"ckpt", "list", "--job", dir}, is_dir},
      {{"sim", "eval", "--trace", dir, "--samples", "1"}, is_dir},
      {{"train", fifo}, fifo + ": is a named pipe (FIFO), expected a regular file"},
      {{"run", fifo}, fifo + ": is a named pipe (FIFO), expected a regular file"},
      {{"train", "/dev/zero"}, "/dev/zero: is a character device, expected a regular file"},
      {{"run", "/dev/zero"}, "/dev/zero: is a character device, expected a regular file"},
  };
  int i = 0;
  for (const auto& c : cases) {
    ExpectRefused(Run(c.args, fmt::format("special{}", i++)), {c.expected},
                  fmt::format("spot {}", fmt::join(c.args, " ")));
  }
  // A market.traces entry that is a directory.
  fs::path job = WriteJob("dirtrace", RunYaml(dir, ""));
  ExpectRefused(Run({"run", job.string()}, "dirtrace"), {job.string(), is_dir},
                "market.traces: a directory");
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing is started for a bad job";
}

// A job file that is not one: refused with what is wrong with it, before
// anything runs (each was accepted, or misread, or said "bad file").
TEST_F(InputTest, MalformedJobFilesAreRefused) {
  const std::string job = SmallJobYaml(dir_ / "out", 10, "");
  std::string utf16 = "\xFF\xFE";
  for (char ch : job) utf16 += std::string{ch, '\0'};
  const struct {
    std::string name, bytes;
    std::vector<std::string> expected;
  } cases[] = {
      {"utf16", utf16, {"utf16.yaml: is UTF-16 text", "save it as UTF-8"}},
      {"comment",
       job + "# " + std::string(50 << 20, 'x') + "\n",
       {"comment.yaml: too large (", "bytes; at most 4194304"}},
      {"twodocs", job + "---\n" + job, {"twodocs.yaml:", "a second YAML document"}},
      {"deep",
       job + "extra: " + std::string(100000, '[') + "\n",
       {"deep.yaml: invalid YAML: mappings and lists nested more than"}},
      {"quoted",
       SmallJobYaml(dir_ / "out", 10, "eval_batch_size: \"64\"\n"),
       {"quoted.yaml:", "eval_batch_size: expected an integer, got the string \"64\""}},
      {"octal",
       SmallJobYaml(dir_ / "out", 10, "eval_every: 010\n"),
       {"octal.yaml:", "eval_every: '010' has a leading zero"}},
      {"epochs",
       SmallJobYaml(dir_ / "out", 10, "epochs: 9223372036854775807\n"),
       {"epochs.yaml:", "epochs: must be <= 1e+06"}},
  };
  for (const auto& c : cases) {
    fs::path path = WriteFile(c.name + ".yaml", c.bytes);
    ExpectRefused(Run({"train", path.string(), "--plain"}, c.name), c.expected, c.name);
  }
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing is started for a bad job";
}

// market.capacity_scale: 99999999999 passed validation (a long) and then
// aborted in std::stoi; it is now parsed once, with its bounds.
TEST_F(InputTest, CapacityScaleOutOfRangeIsRefused) {
  fs::path trace =
      WriteFile("zone-a_gpu_1.json", R"({"metadata": {"gap_seconds": 60}, "data": [1]})");
  fs::path job = WriteJob("scale", RunYaml(trace.string(), "  capacity_scale: 99999999999\n"));
  ExpectRefused(Run({"run", job.string()}, "scale"),
                {"scale.yaml:", "market.capacity_scale: must be <= 1000"}, "capacity_scale");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

// Traces: a gap of 1e-20 s made the deadline's tick count overflow and the
// simulation spin; a second "data" key was silently preferred to the first.
TEST_F(InputTest, MalformedTracesAreRefused) {
  fs::path tiny = WriteFile("us-east-1a_v100_1.json",
                            R"({"metadata": {"gap_seconds": 1e-20}, "data": [1, 1, 1, 1]})");
  ExpectRefused(
      Run({"sim", "eval", "--trace", tiny.string(), "--compute-hours", "1", "--deadline-hours", "2",
           "--samples", "2", "--policies", "od"},
          "tiny"),
      {"us-east-1a_v100_1.json: metadata.gap_seconds: must be a number of seconds in [1, 604800]"},
      "gap_seconds: 1e-20");
  fs::path dup =
      WriteFile("us-east-1b_v100_1.json",
                R"({"metadata": {"gap_seconds": 60}, "data": [1, 1], "data": [0, 0, 0]})");
  ExpectRefused(Run({"sim", "eval", "--trace", dup.string(), "--samples", "1"}, "dup"),
                {"us-east-1b_v100_1.json: data: given twice (JSON keys must be unique)"},
                "duplicate key");
  fs::path job = WriteJob("dupjob", RunYaml(dup.string(), ""));
  ExpectRefused(Run({"run", job.string()}, "dupjob"),
                {"dupjob.yaml", "us-east-1b_v100_1.json: data: given twice"}, "spot run");
}

// A job has one on-demand price: zones whose traces record different ones
// need resources.ondemand_price; market.trace_convention takes three names.
TEST_F(InputTest, TracesThatDisagreeOnTheOnDemandPriceNeedOne) {
  std::string traces;
  for (const auto& [zone, price] : {std::pair{"zone-a", 6.0}, {"zone-b", 7.0}}) {
    fs::path p = WriteFile(std::string(zone) + "_gpu_1.json",
                           fmt::format(R"({{"metadata": {{"gap_seconds": 60, "price_info":
                               {{"price": 1.0, "on_demand_price": {}}}}}, "data": [0, 1, 0]}})",
                                       price));
    traces += (traces.empty() ? "" : ", ") + p.string();
  }
  fs::path job = WriteJob("twoprices", RunYaml(traces, ""));
  ExpectRefused(Run({"run", job.string()}, "twoprices"),
                {"twoprices.yaml: resources.ondemand_price: not given, and the zones' traces "
                 "record different on-demand prices (zone-a_gpu_1 $6/h, zone-b_gpu_1 $7/h)"},
                "two recorded prices");
  job = WriteJob("convention", RunYaml(traces, "  trace_convention: flags\n"));
  ExpectRefused(Run({"run", job.string()}, "convention"),
                {"convention.yaml:", "market.trace_convention", "flags"}, "trace_convention");
  EXPECT_FALSE(fs::exists(dir_ / "out")) << "nothing is started for a bad job";
}

}  // namespace
}  // namespace spot::testing
