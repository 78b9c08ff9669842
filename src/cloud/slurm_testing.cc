#include "cloud/slurm_testing.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/file_io.h"
#include "core/net.h"
#include "core/process.h"

namespace spot::cloud {
namespace {

constexpr char kIp[] = "/usr/sbin/ip";
constexpr char kNetnsPrefix[] = "spotslurm";  // spotslurm<pid>n<i>
constexpr char kBridgePrefix[] = "ssb";       // ssb<pid>

double WallNow() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Nap() { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

bool PidAlive(long pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

// Runs `ip ...`; an error carrying its stderr when it fails.
Status Ip(const std::string& scratch, std::vector<std::string> args, std::string* out = nullptr) {
  args.insert(args.begin(), kIp);
  std::string cmd;
  for (const std::string& a : args) cmd += (cmd.empty() ? "" : " ") + a;
  SPOT_ASSIGN_OR_RETURN(CliOutput r, RunCli(args, {}, scratch, 30));
  if (r.exit_code != 0) return InternalError(cmd + ": " + r.err);
  if (out != nullptr) *out = r.out;
  return Status::Ok();
}

// Kills every process of a network namespace (slurmd, slurmstepd, jobs).
void KillNamespace(const std::string& scratch, const std::string& ns) {
  std::string pids;
  if (!Ip(scratch, {"netns", "pids", ns}, &pids).ok()) return;
  std::istringstream in(pids);
  long pid = 0;
  while (in >> pid) kill(static_cast<pid_t>(pid), SIGKILL);
}

// The pid in a name made by an earlier cluster ("spotslurm123n1" -> 123).
long PidIn(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t i = prefix.size();
  long pid = 0;
  bool any = false;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    pid = pid * 10 + (name[i++] - '0');
    any = true;
  }
  return any ? pid : -1;
}

// Removes namespaces and bridges left by cluster processes that died.
void CleanStale(const std::string& scratch) {
  std::string list;
  if (Ip(scratch, {"netns", "list"}, &list).ok()) {
    std::istringstream in(list);
    std::string line;
    while (std::getline(in, line)) {
      const std::string ns = line.substr(0, line.find(' '));
      const long pid = PidIn(ns, kNetnsPrefix);
      if (pid <= 0 || PidAlive(pid)) continue;
      KillNamespace(scratch, ns);
      (void)Ip(scratch, {"netns", "del", ns});
    }
  }
  std::string links;
  if (Ip(scratch, {"-o", "link", "show", "type", "bridge"}, &links).ok()) {
    std::istringstream in(links);
    std::string line;
    while (std::getline(in, line)) {
      // "12: ssb123: <BROADCAST,..."
      const size_t a = line.find(": ");
      if (a == std::string::npos) continue;
      const std::string name = line.substr(a + 2, line.find(':', a + 2) - a - 2);
      const long pid = PidIn(name, kBridgePrefix);
      if (pid > 0 && !PidAlive(pid)) (void)Ip(scratch, {"link", "del", name});
    }
  }
}

std::string Tail(const std::string& path, size_t lines) {
  Result<std::string> text = ReadFile(path);
  if (!text.ok()) return "";
  std::vector<std::string> all;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out;
}

}  // namespace

std::string SlurmCluster::Unsupported() {
  if (geteuid() != 0) return "needs root (network namespaces, slurmd)";
  for (const char* p : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged",
                        "/usr/bin/sbatch", "/usr/bin/squeue", "/usr/bin/sinfo", kIp}) {
    if (access(p, X_OK) != 0) {
      return std::string(p) +
             " is missing (Debian packages slurmctld slurmd slurm-client munge iproute2)";
    }
  }
  return "";
}

Result<std::unique_ptr<SlurmCluster>> SlurmCluster::Start(const SlurmClusterOptions& options) {
  if (options.nodes < 1) return InvalidArgumentError("Slurm cluster: nodes must be >= 1");
  if (std::string why = Unsupported(); !why.empty()) {
    return FailedPreconditionError("Slurm cluster: " + why);
  }
  SPOT_ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("spot-slurm-cluster"));
  std::unique_ptr<SlurmCluster> c(new SlurmCluster(std::move(dir)));
  Status st = c->Setup(options);
  if (st.ok()) st = c->WaitIdle(options.start_timeout_s);
  if (!st.ok()) {
    const std::string logs = c->LogTail();
    c->Teardown();
    return Status(st.code(), std::string(st.message()) + "\n" + logs);
  }
  return c;
}

Status SlurmCluster::Setup(const SlurmClusterOptions& o) {
  const std::string d = dir();
  const std::string scratch = d + "/cli";
  for (const char* sub : {"/cli", "/munge", "/state", "/log"}) {
    SPOT_RETURN_IF_ERROR(CreateDirectories(d + sub));
  }
  chmod(d.c_str(), 0755);  // slurmd and munged check the directories above their files
  CleanStale(scratch);
  tag_ = std::to_string(getpid());
  nodes_ = o.nodes;

  // The network: a bridge in our namespace, one namespace per node.
  std::string addrs;
  SPOT_RETURN_IF_ERROR(Ip(scratch, {"-4", "-o", "addr", "show"}, &addrs));
  int octet = static_cast<int>(getpid() % 250);
  for (int i = 0; i < 250 && addrs.find(fmt::format("10.213.{}.", octet)) != std::string::npos;
       ++i) {
    octet = (octet + 1) % 250;
  }
  const std::string net = fmt::format("10.213.{}.", octet);
  bridge_ = kBridgePrefix + tag_;
  SPOT_RETURN_IF_ERROR(Ip(scratch, {"link", "add", bridge_, "type", "bridge"}));
  bridge_made_ = true;
  SPOT_RETURN_IF_ERROR(Ip(scratch, {"addr", "add", net + "1/24", "dev", bridge_}));
  host_address_ = net + "1";
  SPOT_RETURN_IF_ERROR(Ip(scratch, {"link", "set", bridge_, "up"}));
  for (int i = 1; i <= o.nodes; ++i) {
    const std::string ns = fmt::format("{}{}n{}", kNetnsPrefix, tag_, i);
    const std::string veth = fmt::format("ssv{}n{}", tag_, i);
    SPOT_RETURN_IF_ERROR(Ip(scratch, {"netns", "add", ns}));
    netns_.push_back(ns);
    SPOT_RETURN_IF_ERROR(
        Ip(scratch, {"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns}));
    SPOT_RETURN_IF_ERROR(Ip(scratch, {"link", "set", veth, "master", bridge_, "up"}));
    SPOT_RETURN_IF_ERROR(
        Ip(scratch, {"-n", ns, "addr", "add", fmt::format("{}{}/24", net, i + 1), "dev", "eth0"}));
    SPOT_RETURN_IF_ERROR(Ip(scratch, {"-n", ns, "link", "set", "eth0", "up"}));
    SPOT_RETURN_IF_ERROR(Ip(scratch, {"-n", ns, "link", "set", "lo", "up"}));
  }

  // munged with a key and socket of its own.
  const std::string key = d + "/munge/munge.key", sock = d + "/munge/socket";
  {
    std::ifstream rnd("/dev/urandom", std::ios::binary);
    std::string bytes(1024, '\0');
    rnd.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    SPOT_RETURN_IF_ERROR(WriteFileAtomically(key, bytes));
    chmod(key.c_str(), 0400);
  }
  SPOT_ASSIGN_OR_RETURN(
      munged_pid_,
      Spawn({.argv = {"/usr/sbin/munged", "-F", "-f", "--socket=" + sock, "--key-file=" + key,
                      "--pid-file=" + d + "/munge/munged.pid", "--seed-file=" + d + "/munge/seed",
                      "--log-file=" + d + "/log/munged.log"},
             .log_path = d + "/log/munged.out",
             .parent_death_signal = SIGKILL}));
  for (double until = WallNow() + 10; !std::filesystem::exists(sock); Nap()) {
    if (WallNow() > until) return UnavailableError("munged did not create its socket in 10 s");
  }

  // slurm.conf: the settings a root cluster on one machine needs.
  SPOT_ASSIGN_OR_RETURN(int ctld_port, PickFreePort());
  SPOT_ASSIGN_OR_RETURN(int slurmd_port, PickFreePort());
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string nodes_line, node_list;
  for (int i = 1; i <= o.nodes; ++i) {
    nodes_line += fmt::format("NodeName=node{} NodeAddr={}{} CPUs={} State=UNKNOWN\n", i, net,
                              i + 1, o.cpus_per_node);
    node_list += fmt::format("{}node{}", i > 1 ? "," : "", i);
    SPOT_RETURN_IF_ERROR(CreateDirectories(fmt::format("{}/spool/node{}", d, i)));
  }
  const std::string conf = fmt::format(
      "ClusterName=spottest\n"
      "SlurmctldHost={host}({net}1)\n"
      "SlurmctldPort={cport}\nSlurmdPort={dport}\n"
      "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n"
      "SlurmUser=root\nSlurmdUser=root\n"
      "StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n\n"
      "SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.%n.pid\n"
      "SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.%n.log\n"
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
      "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
      "JobCompType=jobcomp/none\nMpiDefault=none\n"
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
      "SlurmdParameters=config_overrides\nReturnToService=2\n"
      "SchedulerType=sched/backfill\n"
      "SchedulerParameters=sched_interval=1,sched_min_interval=100000\n"
      "PreemptType=preempt/partition_prio\nPreemptMode=CANCEL\n"
      "SlurmctldParameters=preempt_send_user_signal\n"
      "MinJobAge=600\nMessageTimeout=5\nSlurmctldTimeout=10\nSlurmdTimeout=30\n"
      "InactiveLimit=0\nKillWait=5\n"
      "{nodes}"
      "PartitionName=spot Nodes={list} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 "
      "GraceTime={grace} PreemptMode=CANCEL\n"
      "PartitionName=spotlong Nodes={list} MaxTime=INFINITE State=UP PriorityTier=1 "
      "GraceTime=120 PreemptMode=CANCEL\n"
      "PartitionName=urgent Nodes={list} MaxTime=INFINITE State=UP PriorityTier=10 "
      "PreemptMode=OFF\n"
      "PartitionName=closed Nodes={list} MaxTime=INFINITE State=DOWN PriorityTier=1\n",
      fmt::arg("host", host), fmt::arg("net", net), fmt::arg("cport", ctld_port),
      fmt::arg("dport", slurmd_port), fmt::arg("sock", sock), fmt::arg("d", d),
      fmt::arg("nodes", nodes_line), fmt::arg("list", node_list),
      fmt::arg("grace", o.grace_time_s));
  conf_path_ = d + "/slurm.conf";
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(conf_path_, conf));
  // This machine mixes cgroup v1 and v2 mounts; slurmd's autodetection fails on that.
  SPOT_RETURN_IF_ERROR(WriteFileAtomically(
      d + "/cgroup.conf", "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"));

  SPOT_ASSIGN_OR_RETURN(slurmctld_pid_,
                        Spawn({.argv = {"/usr/sbin/slurmctld", "-D", "-i", "-f", conf_path_},
                               .log_path = d + "/log/slurmctld.out",
                               .parent_death_signal = SIGKILL}));
  for (int i = 1; i <= o.nodes; ++i) {
    SPOT_ASSIGN_OR_RETURN(
        int64_t pid, Spawn({.argv = {kIp, "netns", "exec", netns_[i - 1], "/usr/sbin/slurmd", "-D",
                                     "-f", conf_path_, "-N", fmt::format("node{}", i)},
                            .log_path = fmt::format("{}/log/slurmd.node{}.out", d, i),
                            .parent_death_signal = SIGKILL}));
    slurmd_pids_.push_back(pid);
  }
  return Status::Ok();
}

Status SlurmCluster::WaitIdle(double timeout_s) {
  std::string last;
  for (double until = WallNow() + timeout_s;; Nap()) {
    // Every node is in partition spot, listed there once.
    Result<CliOutput> r =
        Tool("sinfo", {"--noheader", "--Node", "--partition=spot", "--format=%N %t"});
    if (r.ok() && r->exit_code == 0) {
      int idle = 0;
      std::istringstream in(r->out);
      std::string name, state;
      while (in >> name >> state) idle += state == "idle";
      if (idle == nodes_) return Status::Ok();
      last = r->out;
    } else if (r.ok()) {
      last = r->err;
    }
    if (WallNow() > until) {
      return DeadlineExceededError(
          fmt::format("Slurm nodes not idle within {:g} s; sinfo: {}", timeout_s, last));
    }
  }
}

std::vector<std::string> SlurmCluster::node_names() const {
  std::vector<std::string> out;
  for (int i = 1; i <= nodes_; ++i) out.push_back(fmt::format("node{}", i));
  return out;
}

Result<CliOutput> SlurmCluster::Tool(const std::string& name, std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/" + name);
  return RunCli(args, {{"SLURM_CONF", conf_path_}}, dir() + "/cli", 30);
}

Status SlurmCluster::CancelAll(double timeout_s) {
  SPOT_ASSIGN_OR_RETURN(CliOutput r, Tool("scancel", {"--user=root"}));
  if (r.exit_code != 0) return InternalError("scancel --user=root: " + r.err);
  for (double until = WallNow() + timeout_s;; Nap()) {
    SPOT_ASSIGN_OR_RETURN(CliOutput q, Tool("squeue", {"--noheader", "--format=%i %T"}));
    if (q.exit_code == 0 && q.out.find_first_not_of(" \n") == std::string::npos) {
      return Status::Ok();
    }
    if (WallNow() > until) {
      return DeadlineExceededError(
          fmt::format("Slurm jobs still there {:g} s after scancel: {}", timeout_s, q.out));
    }
  }
}

std::string SlurmCluster::LogTail() const {
  std::string out;
  const std::string d = dir();
  std::vector<std::string> logs = {d + "/log/munged.out", d + "/log/slurmctld.log",
                                   d + "/log/slurmctld.out"};
  for (int i = 1; i <= nodes_; ++i) {
    logs.push_back(fmt::format("{}/log/slurmd.node{}.log", d, i));
    logs.push_back(fmt::format("{}/log/slurmd.node{}.out", d, i));
  }
  for (const std::string& l : logs) {
    std::string t = Tail(l, 8);
    if (!t.empty()) out += l.substr(d.size() + 1) + ":\n" + t;
  }
  return out;
}

void SlurmCluster::Teardown() {
  const std::string scratch = dir() + "/cli";
  for (const std::string& ns : netns_) KillNamespace(scratch, ns);
  for (int64_t pid : slurmd_pids_) (void)StopProcess(pid, 0);
  slurmd_pids_.clear();
  if (slurmctld_pid_ > 0) (void)StopProcess(slurmctld_pid_, 2);
  if (munged_pid_ > 0) (void)StopProcess(munged_pid_, 1);
  slurmctld_pid_ = munged_pid_ = 0;
  for (const std::string& ns : netns_) {
    KillNamespace(scratch, ns);  // anything a dying slurmstepd started meanwhile
    (void)Ip(scratch, {"netns", "del", ns});
  }
  netns_.clear();
  if (bridge_made_) (void)Ip(scratch, {"link", "del", bridge_});
  bridge_made_ = false;
}

SlurmCluster::~SlurmCluster() { Teardown(); }

}  // namespace spot::cloud
