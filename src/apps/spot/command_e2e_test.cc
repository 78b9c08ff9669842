// End-to-end tests of command workloads (`spot run` with `run:`): the real
// controller and `spot agent` on each instance, running real programs (small
// shell scripts here: what they do is the point, not what they train),
// preempted by a replayed market through their metadata endpoints.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "apps/spot/e2e_support.h"
#include "apps/spot/test_process.h"
#include "control/job_store.h"
#include "core/net.h"
#include "core/number_text.h"
#include "core/process_cpu.h"

namespace spot::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTicks = 400;

// The number of a "test accuracy 0.8632 after N steps" line; -1 for another.
double Accuracy(const std::string& line) {
  auto v = ParseNumber(line.substr(14, line.find(' ', 14) - 14));
  return v.ok() ? *v : -1;
}

class CommandTest : public E2eTest {
 protected:
  // A zone's trace: up but at the ticks in `down` (one tick: one wall second).
  void WriteTrace(const std::string& zone, std::initializer_list<std::pair<int, int>> down) {
    std::vector<int> counts(kTicks, 1);
    for (auto [from, to] : down) {
      for (int t = from; t <= to; ++t) counts[t] = 0;
    }
    json j = {{"metadata", {{"gap_seconds", 60}}}, {"data", counts}};
    std::ofstream(dir_ / (zone + "_gpu_1.json")) << j.dump();
  }
  // An executable shell script in the test's directory.
  fs::path Script(const std::string& name, const std::string& body) {
    fs::path p = dir_ / name;
    std::ofstream(p) << "#!/bin/sh\n" << body;
    fs::permissions(p, fs::perms::owner_all);
    return p;
  }
  // A command job over the traces written so far; `extra` is appended at the
  // top level (job_recovery, resources' nproc_per_node go there).
  fs::path CommandJob(const std::string& name, const std::string& run, int nodes,
                      const std::string& extra, const std::string& resources = "",
                      const std::string& workdir = "") {
    std::string traces;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().string().ends_with("_gpu_1.json")) traces += "    - " + e.path().string() + "\n";
    }
    return WriteJob(
        name,
        fmt::format("name: {name}\npolicy: greedy\ncompute_hours: 0.2\ndeadline_hours: 3\n"
                    "run: {run}\nworkdir: {dir}\noutput_dir: {out}\n"
                    "resources:\n  nodes: {nodes}\n  min_nodes: 1\n  ondemand_price: 3.0\n"
                    "  changeover_hours: 0.02\n{resources}"
                    "market:\n  traces:\n{traces}  time_compression: 60\n  notice_seconds: 120\n"
                    "  when_missing: error\n"
                    "controller:\n  reconcile_interval_s: 0.02\n  terminate_grace_s: 2\n{extra}",
                    fmt::arg("name", name), fmt::arg("run", run),
                    fmt::arg("dir", workdir.empty() ? dir_.string() : workdir),
                    fmt::arg("out", (dir_ / name).string()), fmt::arg("nodes", nodes),
                    fmt::arg("resources", resources), fmt::arg("traces", traces),
                    fmt::arg("extra", extra)));
  }
  json Summary(const std::string& name) {
    std::ifstream in(dir_ / name / "run-summary.json");
    return json::parse(in, nullptr, false);
  }
  static std::string ReadText(const fs::path& path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // Every instance log of a job, concatenated.
  std::string InstanceLogs(const std::string& name) {
    std::string all;
    for (const auto& e : fs::directory_iterator(dir_ / name / "instances")) {
      if (e.path().extension() == ".log") all += ReadText(e.path());
    }
    return all;
  }
};

// A counting program: one step every 0.1 s up to STEPS, its position saved in
// SPOT_CHECKPOINT_DIR at the step boundary after the notice signal (and at
// the end), resumed from it;
// each start writes its torchrun and SpotTrain variables to a file.
constexpr char kCounter[] = R"sh(
dir="$SPOT_CHECKPOINT_DIR"; mkdir -p "$dir"
env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|NODE_RANK|MASTER_ADDR|MASTER_PORT|SPOT_[A-Z_]+)=' \
  > "$dir/env.$SPOT_INSTANCE.$RANK.$$"
step=$(cat "$dir/step.$RANK" 2>/dev/null || echo 0)
echo "start at $step"
stop=
trap 'stop=1' TERM
while [ "$step" -lt "$STEPS" ] && [ -z "$stop" ]; do
  sleep 0.1
  step=$((step + 1))
  echo "$step" >> "$dir/steps.$RANK"
done
echo "$step" > "$dir/step.$RANK"
[ -n "$stop" ] && echo "saved $step; notice: $(cat "$SPOT_NOTICE_FILE")"
exit 0
)sh";

// Two nodes of two ranks each, preempted twice with notices: every start got
// torchrun's variables for its generation (ranks 0..3 of 4, one master) and
// SpotTrain's; every notice reached the program, which saved and resumed
// there, so no step was counted twice; the job ends when the program does.
// Each gang has three seconds or more before its notice: an agent starting
// on a loaded machine takes two (one that is noticed before its program
// starts leaves, and the generations below would not all happen).
TEST_F(CommandTest, NoticesReachTheProgramWhichResumesWhereItSaved) {
  WriteTrace("zone-a", {{6, 7}});
  WriteTrace("zone-b", {{0, 6}, {12, 13}});
  Script("count.sh", kCounter);
  auto job =
      CommandJob("counted", "./count.sh", 2, "envs:\n  STEPS: \"160\"\n", "  nproc_per_node: 2\n");
  ProcessResult r = Spot({"run", job.string(), "--status-interval", "2"}, "counted");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("counted");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["preemptions"], 2) << r.out;
  EXPECT_GE(s["notices"].get<int>(), 2);
  EXPECT_EQ(s["program_failures"], 0);
  EXPECT_EQ(s["killed_at_reclaim"], 0);

  const fs::path ckpt = dir_ / "counted" / "checkpoints";
  // Every rank counted each step once: a step saved at a notice is not redone.
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(ckpt / fmt::format("steps.{}", rank));
    std::vector<int> steps;
    for (int v; in >> v;) steps.push_back(v);
    ASSERT_EQ(steps.size(), 160u) << "rank " << rank;
    for (int i = 0; i < 160; ++i) ASSERT_EQ(steps[i], i + 1) << "rank " << rank;
  }
  // The variables of each start: a generation's ranks are 0..W-1 of its
  // W = 2 x its nodes, with one master (min_nodes is 1: a node left alone by
  // a notice may run a generation of its own until the gang is whole again);
  // SpotTrain's point at the job.
  std::map<std::string, std::set<int>> ranks_by_master;
  std::map<std::string, std::set<std::string>> world_by_master;
  int starts = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    if (!e.path().filename().string().starts_with("env.")) continue;
    ++starts;
    std::map<std::string, std::string> env;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      env[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
    }
    EXPECT_TRUE(env["WORLD_SIZE"] == "4" || env["WORLD_SIZE"] == "2") << e.path();
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    auto number = [&](const char* name) {
      auto v = ParseInteger(env[name]);
      return v.ok() ? *v : int64_t{-1};
    };
    EXPECT_EQ(number("RANK"), 2 * number("NODE_RANK") + number("LOCAL_RANK")) << e.path();
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["SPOT_JOB"], "counted");
    EXPECT_EQ(env["SPOT_CHECKPOINT_DIR"], ckpt.string());
    EXPECT_EQ(env["SPOT_NOTICE_SIGNAL"], "SIGTERM");
    EXPECT_TRUE(env["SPOT_CONTROLLER_URL"].starts_with("http://127.0.0.1:")) << e.path();
    EXPECT_TRUE(fs::exists(env["SPOT_TOKEN_FILE"])) << e.path();
    EXPECT_TRUE(env["SPOT_NOTICE_FILE"].ends_with("notice.json"));
    EXPECT_LT(number("RANK"), number("WORLD_SIZE")) << e.path();
    // Below the ephemeral range: no outgoing connection takes it before
    // rank 0's TCPStore binds it.
    if (EphemeralPortRange().first >= 2048) {
      EXPECT_LT(number("MASTER_PORT"), EphemeralPortRange().first) << e.path();
      EXPECT_GE(number("MASTER_PORT"), 1024) << e.path();
    }
    ranks_by_master[env["MASTER_PORT"]].insert(static_cast<int>(number("RANK")));
    world_by_master[env["MASTER_PORT"]].insert(env["WORLD_SIZE"]);
  }
  EXPECT_GE(starts, 12) << "three generations of four ranks";
  int whole = 0;  // generations of the whole gang, every rank started
  for (const auto& [port, ranks] : ranks_by_master) {
    EXPECT_EQ(world_by_master[port].size(), 1u) << "generation with master port " << port;
    whole += ranks == std::set<int>{0, 1, 2, 3} ? 1 : 0;
  }
  EXPECT_GE(whole, 3) << "the first generation and one after each preemption";
  // The notice file reached the program with the deadline.
  const std::string logs = InstanceLogs("counted");
  EXPECT_NE(logs.find("\"deadline_unix_s\":"), std::string::npos) << logs;
}

// A program failing (exit 3) is restarted on a new instance as many times as
// job_recovery.max_restarts_on_errors allows; one more failure fails the job,
// saying why.
TEST_F(CommandTest, AFailingProgramUsesUpItsRestartsThenFailsTheJob) {
  WriteTrace("zone-a", {});
  Script("fail.sh", "echo \"error: no GPU found\" >&2\nexit 3\n");
  auto job = CommandJob("failing", "./fail.sh", 1, "job_recovery:\n  max_restarts_on_errors: 2\n");
  ProcessResult r = Spot({"run", job.string()}, "failing");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  json s = Summary("failing");
  EXPECT_EQ(s["state"], "FAILED");
  EXPECT_EQ(s["program_failures"], 3);
  const std::string message = s["message"];
  EXPECT_NE(message.find("the program failed"), std::string::npos) << message;
  EXPECT_NE(message.find("exit code 3"), std::string::npos) << message;
  EXPECT_NE(message.find("error: no GPU found"), std::string::npos) << message;
  EXPECT_NE(message.find("max_restarts_on_errors is 2"), std::string::npos) << message;
  EXPECT_NE(r.out.find("FAILED"), std::string::npos);
}

// Exit codes in recover_on_exit_codes restart the program on a new instance
// without counting against max_restarts_on_errors (0 here).
TEST_F(CommandTest, RecoverExitCodesRestartWithoutCountingAsFailures) {
  WriteTrace("zone-a", {});
  Script("flaky.sh", R"(
n=$(cat "$SPOT_CHECKPOINT_DIR/tries" 2>/dev/null || echo 0)
mkdir -p "$SPOT_CHECKPOINT_DIR"; echo $((n + 1)) > "$SPOT_CHECKPOINT_DIR/tries"
[ "$n" -lt 2 ] && exit 42
exit 0
)");
  auto job = CommandJob("flaky", "./flaky.sh", 1, "job_recovery:\n  recover_on_exit_codes: [42]\n");
  ProcessResult r = Spot({"run", job.string()}, "flaky");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("flaky");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["program_recoveries"], 2);
  EXPECT_EQ(s["program_failures"], 0);
  EXPECT_EQ(ReadText(dir_ / "flaky" / "checkpoints" / "tries"), "3\n");
}

// A program that ignores its notice runs until the machine goes at the
// reclaim: it is killed with it, and counted.
TEST_F(CommandTest, AProgramIgnoringItsNoticeIsKilledAtTheReclaimAndCounted) {
  WriteTrace("zone-a", {{4, 6}});
  WriteTrace("zone-b", {{0, 5}});
  Script("stubborn.sh", R"(
mkdir -p "$SPOT_CHECKPOINT_DIR"
n=$(cat "$SPOT_CHECKPOINT_DIR/starts" 2>/dev/null || echo 0)
echo $((n + 1)) > "$SPOT_CHECKPOINT_DIR/starts"
[ "$n" -ge 1 ] && exit 0
trap 'echo "ignoring the notice"' TERM
while true; do sleep 0.1; done
)");
  auto job = CommandJob("stubborn", "./stubborn.sh", 1, "");
  ProcessResult r = Spot({"run", job.string()}, "stubborn");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("stubborn");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["killed_at_reclaim"], 1) << r.out;
  EXPECT_NE(InstanceLogs("stubborn").find("ignoring the notice"), std::string::npos);
  EXPECT_NE(r.out.find("1 killed at the reclaim"), std::string::npos) << r.out;
}

// A program that never reports is hung after silence_seconds: its instance is
// replaced, as a failure, and the job fails once the restarts are used up.
TEST_F(CommandTest, ASilentProgramIsReplacedThenFailsTheJob) {
  WriteTrace("zone-a", {});
  Script("silent.sh", "while true; do sleep 0.1; done\n");
  auto job = CommandJob("silent", "./silent.sh", 1,
                        "job_recovery:\n  silence_seconds: 2\n  max_restarts_on_errors: 1\n");
  ProcessResult r = Spot({"run", job.string()}, "silent");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  json s = Summary("silent");
  EXPECT_EQ(s["state"], "FAILED");
  EXPECT_EQ(s["program_failures"], 2);
  EXPECT_NE(s["message"].get<std::string>().find("sent no report for"), std::string::npos)
      << s["message"];
}

// The plain PyTorch example (examples/pytorch-fashion-mnist/train.py, Debian's
// python3-torch) under `spot run`, preempted twice with notices: it saves at
// each notice and resumes there, so its loss curve is the uninterrupted run's
// bit for bit, and so is its test accuracy.
TEST_F(CommandTest, PlainPyTorchResumesBitForBitUnderNotices) {
  WriteTrace("zone-a", {{4, 5}});
  WriteTrace("zone-b", {{0, 4}, {10, 11}});
  const std::string script =
      std::string(SPOT_SOURCE_DIR) + "/examples/pytorch-fashion-mnist/train.py";
  const std::string args = fmt::format("--steps 900 --save-every 300 --data {}", kDataset);
  // The uninterrupted run finds the client the way the job file says.
  ::setenv("PYTHONPATH", (std::string(SPOT_SOURCE_DIR) + "/python").c_str(), 1);
  ProcessResult alone =
      RunProcess({"/usr/bin/python3", script, "--steps", "900", "--save-every", "300", "--data",
                  kDataset, "--checkpoint-dir", (dir_ / "alone-ckpt").string(), "--loss-log",
                  (dir_ / "alone.csv").string()},
                 (dir_ / "alone").string());
  ::unsetenv("PYTHONPATH");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  auto job = CommandJob("pytorch",
                        fmt::format("/usr/bin/python3 {} {} --loss-log {}", script, args,
                                    (dir_ / "spot.csv").string()),
                        1, fmt::format("envs:\n  PYTHONPATH: {}/python\n", SPOT_SOURCE_DIR));
  ProcessResult r = Spot({"run", job.string()}, "pytorch");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("pytorch");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["preemptions"], 2) << r.out;
  EXPECT_EQ(s["steps"], 900);
  EXPECT_EQ(s["steps_redone"], 0) << r.out;
  const std::string want = ReadText(dir_ / "alone.csv"), got = ReadText(dir_ / "spot.csv");
  EXPECT_EQ(std::count(want.begin(), want.end(), '\n'), 900);
  EXPECT_TRUE(want == got) << "the resumed loss curve differs from the uninterrupted one";
  // The same model at the end: the same test accuracy line.
  const size_t at = alone.out.find("test accuracy");
  ASSERT_NE(at, std::string::npos) << alone.out;
  const std::string accuracy = alone.out.substr(at, alone.out.find('\n', at) - at);
  EXPECT_NE(InstanceLogs("pytorch").find(accuracy), std::string::npos) << accuracy;
  // The controller got it from the program's last report.
  EXPECT_NEAR(s["test_accuracy"].get<double>(), Accuracy(accuracy), 5e-5) << accuracy;
  // Each start after the first resumed from a checkpoint the notice made.
  EXPECT_EQ(s["notices"], 2);
}

// A make-before-break handover of a command workload: `mdp` (acting as `up`
// in this young market, but leaving on-demand for spot make before break)
// runs on-demand while zone-a is down, and when it comes back at tick 20
// starts the spot gang beside it. The agents' group has room for one gang:
// the newcomers wait for it, and start the program once the on-demand
// agents have left, which they do after their program saved on the SIGTERM
// (a save of a second here; the rendezvous is not told they are gone before). Every rank counts
// each step once; the starts after the handover resume where it saved.
TEST_F(CommandTest, AHandoverResumesTheProgramWhereTheLeavingGangSaved) {
  std::vector<int> counts(kTicks, 1);
  for (int t = 0; t < 20; ++t) counts[t] = 0;
  std::ofstream(dir_ / "zone-a_gpu_1.json")
      << json{{"metadata", {{"gap_seconds", 60}}}, {"data", counts}}.dump();
  Script("count.py", R"(exec /usr/bin/python3 - "$@" <<'PY'
import os, time
import spottrain
spottrain.init()  # its handler of the notice signal (SIGTERM): should_stop()
d = os.environ["SPOT_CHECKPOINT_DIR"]
os.makedirs(d, exist_ok=True)
rank, steps = os.environ["RANK"], int(os.environ["STEPS"])
saved = os.path.join(d, "step." + rank)
step = int(open(saved).read()) if os.path.exists(saved) else 0
print("start at", step, flush=True)
while step < steps and not spottrain.should_stop():
    time.sleep(0.1)
    step += 1
    with open(os.path.join(d, "steps." + rank), "a") as f:
        f.write("%d\n" % step)
    if rank == "0":
        spottrain.report(step, total_steps=steps)
if step < steps:
    time.sleep(1)  # a checkpoint takes a while to write
with open(saved + ".tmp", "w") as f:
    f.write(str(step))
os.replace(saved + ".tmp", saved)
print("saved", step, flush=True)
PY
)");
  auto job = CommandJob(
      "handover", "./count.py", 2,
      fmt::format("envs:\n  STEPS: \"200\"\n  PYTHONPATH: {}/python\n", SPOT_SOURCE_DIR));
  std::string text = ReadText(job);
  for (auto [from, to] : {std::pair{"policy: greedy", "policy: mdp"},
                          std::pair{"time_compression: 60", "time_compression: 120"}}) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, std::string(from).size(), to);
  }
  std::ofstream(job) << text;
  ProcessResult r = Spot({"run", job.string()}, "handover");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("handover");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["program_failures"], 0);
  // The handover happened: a spot gang launched while on-demand ran, which
  // was then let go for it.
  auto store = control::JobStore::Open((dir_ / "handover" / "controller" / "state.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto instances = (*store)->Instances("handover", false);
  ASSERT_TRUE(instances.ok());
  int on_demand = 0, spot = 0;
  double first_spot_launch = 1e18, on_demand_end = 0;
  for (const control::InstanceRecord& i : *instances) {
    if (i.spot) {
      ++spot;
      first_spot_launch = std::min(first_spot_launch, i.launched_s);
    } else {
      ++on_demand;
      EXPECT_EQ(i.end_reason, "terminated");
      on_demand_end = std::max(on_demand_end, i.ended_s.value_or(0));
    }
  }
  EXPECT_EQ(on_demand, 2);
  EXPECT_EQ(spot, 2);
  EXPECT_LT(first_spot_launch, on_demand_end) << "no make before break: the scenario is wrong";
  const fs::path ckpt = dir_ / "handover" / "checkpoints";
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(ckpt / ("steps." + std::to_string(rank)));
    std::vector<int> steps;
    for (int v; in >> v;) steps.push_back(v);
    ASSERT_EQ(steps.size(), 200u) << "rank " << rank << " counted a step twice or missed one";
    for (int k = 0; k < 200; ++k) ASSERT_EQ(steps[k], k + 1) << "rank " << rank;
  }
  const std::string logs = InstanceLogs("handover");
  EXPECT_NE(logs.find("saved"), std::string::npos) << logs;
  size_t resumed = 0;
  for (size_t at = logs.find("start at "); at != std::string::npos;
       at = logs.find("start at ", at + 1)) {
    resumed += logs.compare(at, 10, "start at 0") != 0;
  }
  EXPECT_EQ(resumed, 2u) << "both ranks resume where they saved\n" << logs;
}

// The DistributedDataParallel example (Gloo, two nodes of one rank) under
// `spot run`, its gang preempted twice with notices: both ranks save and stop
// at the same step and start again in the next generation with torchrun's
// variables for it; the loss curve is that of an uninterrupted two-rank run.
TEST_F(CommandTest, DdpOverGlooResumesBitForBitUnderNotices) {
  WriteTrace("zone-a", {{4, 5}});
  WriteTrace("zone-b", {{0, 4}, {10, 11}});
  const std::string script = std::string(SPOT_SOURCE_DIR) + "/examples/pytorch-ddp/train.py";
  const std::string args = fmt::format("--steps 500 --save-every 250 --data {}", kDataset);
  // Uninterrupted: two ranks started by hand, as torchrun would.
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  ProcessResult alone = RunProcess(
      {"/bin/sh", "-c",
       fmt::format("for r in 0 1; do PYTHONPATH={src}/python MASTER_ADDR=127.0.0.1 "
                   "MASTER_PORT={port} WORLD_SIZE=2 RANK=$r /usr/bin/python3 {script} {args} "
                   "--checkpoint-dir {dir}/alone-ckpt --loss-log {dir}/alone.csv & done; wait",
                   fmt::arg("src", SPOT_SOURCE_DIR), fmt::arg("port", *port),
                   fmt::arg("script", script), fmt::arg("args", args),
                   fmt::arg("dir", dir_.string()))},
      (dir_ / "alone").string());
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  auto job = CommandJob("ddp",
                        fmt::format("/usr/bin/python3 {} {} --loss-log {}", script, args,
                                    (dir_ / "spot.csv").string()),
                        2, fmt::format("envs:\n  PYTHONPATH: {}/python\n", SPOT_SOURCE_DIR));
  ProcessResult r = Spot({"run", job.string()}, "ddp");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("ddp");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_EQ(s["preemptions"], 2) << r.out;
  EXPECT_EQ(s["steps"], 500);
  EXPECT_EQ(s["steps_redone"], 0) << r.out;
  EXPECT_EQ(s["program_failures"], 0);
  const std::string want = ReadText(dir_ / "alone.csv"), got = ReadText(dir_ / "spot.csv");
  EXPECT_EQ(std::count(want.begin(), want.end(), '\n'), 500);
  EXPECT_TRUE(want == got) << "the resumed loss curve differs from the uninterrupted one";
  const size_t at = alone.out.find("test accuracy");
  ASSERT_NE(at, std::string::npos) << alone.out;
  EXPECT_NE(InstanceLogs("ddp").find(alone.out.substr(at, alone.out.find('\n', at) - at)),
            std::string::npos);
}

// SIGKILL of the controller mid-job: the agents and the program run on; the
// same command resumes the job on the same API port (the URL the program was
// told), so the program's reports reach the new controller and the job ends.
TEST_F(CommandTest, AKilledControllerResumesAndTheProgramsReportsReachTheNewOne) {
  WriteTrace("zone-a", {});
  const std::string script =
      std::string(SPOT_SOURCE_DIR) + "/examples/pytorch-fashion-mnist/train.py";
  auto job = CommandJob("killed",
                        fmt::format("/usr/bin/python3 {} --steps 400 --save-every 100 --data {} "
                                    "--slow-step-ms 30",
                                    script, kDataset),
                        1, fmt::format("envs:\n  PYTHONPATH: {}/python\n", SPOT_SOURCE_DIR));
  const fs::path progress = dir_ / "killed" / "progress.json";
  int64_t step_at_kill = 0;
  {
    ChildProcess first({SPOT_BIN, "run", job.string()}, (dir_ / "first").string());
    for (int i = 0; i < 600; ++i) {
      auto p = json::parse(ReadText(progress), nullptr, false);
      if (p.is_object() && p.value("step", 0) >= 50) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    first.Kill(SIGKILL);
    first.Wait();
    step_at_kill = json::parse(ReadText(progress), nullptr, false).value("step", int64_t{0});
  }
  ASSERT_GE(step_at_kill, 50);
  ASSERT_LT(step_at_kill, 400) << "the program finished before the kill";
  const std::string port = ReadText(dir_ / "killed" / "controller" / "api.port");
  ProcessResult r = Spot({"run", job.string()}, "killed");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json s = Summary("killed");
  EXPECT_EQ(s["state"], "SUCCEEDED");
  EXPECT_TRUE(s["resumed"].get<bool>());
  EXPECT_EQ(s["steps"], 400);
  EXPECT_EQ(s["launches"], 0) << "the running instance is adopted, not replaced";
  EXPECT_EQ(ReadText(dir_ / "killed" / "controller" / "api.port"), port);
}

// A command worker's utilization: its agent serves the program's CPU time as
// busy time, which the controller turns into per-tick samples (one tick a
// wall second here) and the dashboard into its worker-by-tick heatmap, as
// for a native worker. The oracle is the program's own account (`times`):
// the ticks add up to its CPU seconds over the CPUs of the node, whatever
// share of them a loaded machine gives it, less what happened before the
// first scrape and after the last (a second each at most).
TEST_F(CommandTest, ABusyProgramShowsAsTheWorkersUtilization) {
  WriteTrace("zone-a", {});
  Script("burn.sh",
         "for i in 1 2 3 4; do timeout 6 sh -c 'while :; do :; done' & done\n"
         "wait\ntimes > burned.txt\n");
  auto job = CommandJob("burn", "./burn.sh", 1, "");
  ProcessResult r = Spot({"run", job.string()}, "burn");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // `times`: the shell's user and system time, then its children's.
  const std::string burned = ReadText(dir_ / "burned.txt");
  int um = 0, sm = 0;
  double us = 0, ss = 0;
  ASSERT_EQ(std::sscanf(burned.substr(burned.find('\n') + 1).c_str(), "%dm%lfs %dm%lfs", &um, &us,
                        &sm, &ss),
            4)
      << burned;
  const double busy_s = (60 * um + us + 60 * sm + ss) / AvailableCpus();
  ASSERT_GT(busy_s, 0.5) << burned;

  auto store = control::JobStore::Open((dir_ / "burn" / "controller" / "state.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto samples = (*store)->Samples("burn", "busy/");
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  std::map<std::string, double> ticks_sum;  // instance -> its busy fractions added up
  for (const control::SamplePoint& p : *samples) {
    EXPECT_GE(p.value, 0) << p.series;
    EXPECT_LE(p.value, 1) << p.series;
    ticks_sum[p.series.substr(5)] += p.value;
  }
  ASSERT_EQ(ticks_sum.size(), 1u) << "one instance, samples of it";
  const std::string instance = ticks_sum.begin()->first;
  EXPECT_GT(ticks_sum[instance], 0.4 * busy_s) << burned;
  EXPECT_LT(ticks_sum[instance], 1.3 * busy_s + 0.2) << burned;

  // The dashboard of the finished job (`spot monitor`) shows the same cells.
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  ChildProcess monitor({SPOT_BIN, "monitor", job.string(), "--port", std::to_string(*port)},
                       (dir_ / "monitor").string());
  httplib::Client client("127.0.0.1", *port);
  std::string body;
  for (int i = 0; i < 200 && body.empty(); ++i) {
    auto got = client.Get("/api/v1/jobs/burn/dashboard");
    if (got && got->status == 200) body = got->body;
    if (body.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(body.empty()) << "spot monitor did not answer";
  const json u = json::parse(body)["utilization"];
  ASSERT_EQ(u["workers"].size(), 1u) << u.dump();
  const json& row = u["workers"][0];
  EXPECT_EQ(row["id"], instance);
  for (const control::SamplePoint& p : *samples) {
    const size_t k = static_cast<size_t>(std::llround(p.t_s / u["bucket_s"].get<double>()));
    ASSERT_LT(k, row["busy"].size()) << u.dump();
    EXPECT_EQ(row["busy"][k], p.value) << "tick " << k;
  }
  monitor.Kill(SIGTERM);
  EXPECT_EQ(monitor.Wait(10).exit_code, 0);
}

// Command job files get the same checks as any: exit 2 naming the field.
TEST_F(CommandTest, BadCommandJobFilesAreRefused) {
  WriteTrace("zone-a", {});
  const struct {
    std::string extra, message;
  } bad[] = {
      {"train:\n  model: mlp\n", "train: a job has either `train:`"},
      {"envs:\n  SPOT_JOB: x\n", "envs.SPOT_JOB: SPOT_ variables are set by SpotTrain itself"},
      {"envs:\n  2X: y\n", "envs.2X: is not an environment variable name"},
      {"job_recovery:\n  notice_signal: SIGKILL\n", "job_recovery.notice_signal: must be one of"},
      {"job_recovery:\n  recover_on_exit_codes: [0]\n",
       "job_recovery.recover_on_exit_codes: each must be an exit code in [1, 255] (got '0')"},
      {"job_recovery:\n  max_restarts_on_errors: -1\n",
       "job_recovery.max_restarts_on_errors: must be >= 0"},
      {"job_recovery:\n  retries: 3\n", "job_recovery.retries"},
  };
  int i = 0;
  for (const auto& b : bad) {
    auto job = CommandJob(fmt::format("bad{}", i++), "./x.sh", 1, b.extra);
    ProcessResult r = Spot({"run", job.string()}, fmt::format("bad{}", i));
    EXPECT_EQ(r.exit_code, 2) << b.extra << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.extra << "\n" << r.err;
    EXPECT_FALSE(fs::exists(dir_ / fmt::format("bad{}", i - 1))) << "nothing is written";
  }
  // The workdir must be a directory.
  auto job = CommandJob("nodir", "./x.sh", 1, "", "", "/nonexistent/dir");
  ProcessResult r = Spot({"run", job.string()}, "nodir");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("workdir: /nonexistent/dir is not a directory"), std::string::npos) << r.err;
  // A `train:` job may not carry a command's fields.
  auto train = WriteJob("trainjob", fmt::format("name: t\nsetup: pip install x\ntrain:\n  model: "
                                                "mlp\n  output_dir: {}\n",
                                                (dir_ / "t").string()));
  r = Spot({"run", train.string()}, "trainjob");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("setup: belongs to a command workload"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spot::testing
