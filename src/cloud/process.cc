#include "cloud/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

extern char** environ;

namespace spot::cloud {

Result<int64_t> Spawn(const SpawnOptions& options) {
  if (options.argv.empty()) return InvalidArgumentError("spawn: empty command");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls are allowed in a multi-threaded parent.
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos)
      env[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = options.argv;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string log = options.log_path.empty() ? "/dev/null" : options.log_path;

  pid_t pid = ::fork();
  if (pid < 0) return InternalError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.new_session) ::setsid();
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (in < 0 || out < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(out, 2);
    if (in > 2) ::close(in);
    if (out > 2) ::close(out);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return static_cast<int64_t>(pid);
}

ProcessStatus CheckProcess(int64_t pid) {
  ProcessStatus s;
  int status = 0;
  pid_t r = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
  if (r == static_cast<pid_t>(pid)) {
    if (WIFEXITED(status)) s.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
    return s;
  }
  if (r == 0) {
    s.running = true;
    return s;
  }
  // Not our child (ECHILD): ask the kernel whether it runs and is not a zombie.
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')');
  s.running = close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
  return s;
}

bool ProcessMatches(int64_t pid, std::string_view needle) {
  if (pid <= 0 || !CheckProcess(pid).running) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return cmdline.find(needle) != std::string::npos;
}

void SignalProcess(int64_t pid, int sig) {
  if (pid > 0) ::kill(static_cast<pid_t>(pid), sig);
}

Result<int> PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return UnavailableError("no free port on 127.0.0.1: " + err);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace spot::cloud
