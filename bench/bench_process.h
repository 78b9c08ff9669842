// A child process for the workloads that run the real `spot` binary (or
// torchrun): in its own process group, so the whole tree it starts can be
// killed, with its output in a log file.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace spot::bench {

class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const std::string& log) {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);
  }
  ~Proc() { KillAll(); }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  bool started() const { return pid_ > 0; }
  // SIGKILL to the whole process group.
  void KillAll() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGTERM to the process only (`spot run` then cancels its job and
  // terminates its fleet), then up to `grace_s` for it to end.
  void Terminate(double grace_s) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    Wait(grace_s);
  }
  // Exit code, or -signal; -1000 on timeout.
  int Wait(double timeout_s) {
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1000;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace spot::bench
