#pragma once
// A tuning worker: a child process (fork + execve) spoken to by one JSON line per request
// on its stdin and one per answer on its stdout. Its stderr is kept (the last few KiB) to
// explain a crash. A worker that does not answer in time is killed with SIGKILL: a kernel
// spinning forever cannot be stopped any other way, and the driver tears its context down
// with the process.
#include <sys/types.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace attnjit::tune {

class WorkerProcess {
 public:
  // Starts argv[0] with `argv` and the parent's environment plus `env` (NAME, value),
  // which replace variables of the same name. Throws std::runtime_error when it cannot.
  WorkerProcess(const std::vector<std::string>& argv,
                const std::vector<std::pair<std::string, std::string>>& env);
  ~WorkerProcess();  // kills (if still running) and reaps
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  struct Reply {
    enum Kind { kLine, kTimeout, kExited } kind = kExited;
    std::string line;  // kLine: the answer, without its newline
    std::string why;   // kExited: "exit status 3", "killed by signal 11 (Segmentation fault)"
  };
  // Writes `line` + '\n' and waits up to `timeout` for one line back.
  Reply request(const std::string& line, std::chrono::milliseconds timeout);

  void kill();  // SIGKILL and reap; idempotent
  pid_t pid() const noexcept { return pid_; }
  std::string stderr_tail() const { return err_; }

 private:
  void drain_stderr();
  std::string reap_reason(bool block);
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, errfd_ = -1;
  std::string buffered_;  // stdout bytes after the last full line
  std::string err_;
  bool reaped_ = false;
  std::string exit_reason_;
};

}  // namespace attnjit::tune
