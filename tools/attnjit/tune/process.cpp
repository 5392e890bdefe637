// Worker processes for `attnjit tune` (process.hpp).
#include "process.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace attnjit::tune {
namespace {

constexpr size_t kStderrKeep = 4096;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

WorkerProcess::WorkerProcess(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& env) {
  if (argv.empty()) throw std::runtime_error("worker command is empty");
  // Everything the child needs is built before fork: after fork in a threaded parent only
  // async-signal-safe calls are allowed (dup2, close, execve, _exit).
  std::vector<std::string> envs;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    bool replaced = false;
    for (const auto& [name, value] : env)
      if (kv.compare(0, name.size() + 1, name + "=") == 0) replaced = true;
    if (!replaced) envs.push_back(kv);
  }
  for (const auto& [name, value] : env) envs.push_back(name + "=" + value);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid_ == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    const char msg[] = "attnjit tune: cannot execute the worker\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  in_ = in[1];
  out_ = out[0];
  errfd_ = err[0];
  ::fcntl(out_, F_SETFL, ::fcntl(out_, F_GETFL) | O_NONBLOCK);
  ::fcntl(errfd_, F_SETFL, ::fcntl(errfd_, F_GETFL) | O_NONBLOCK);
}

WorkerProcess::~WorkerProcess() { kill(); }

void WorkerProcess::drain_stderr() {
  char buf[4096];
  for (ssize_t n; errfd_ >= 0 && (n = ::read(errfd_, buf, sizeof(buf))) > 0;) {
    err_.append(buf, static_cast<size_t>(n));
    if (err_.size() > kStderrKeep) err_.erase(0, err_.size() - kStderrKeep);
  }
}

std::string WorkerProcess::reap_reason(bool block) {
  if (reaped_) return exit_reason_;
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return {};
  reaped_ = true;
  if (WIFEXITED(status))
    exit_reason_ = fmt::format("exit status {}", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    exit_reason_ = fmt::format("killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  return exit_reason_;
}

WorkerProcess::Reply WorkerProcess::request(const std::string& line, std::chrono::milliseconds timeout) {
  Reply reply;
  if (reaped_ || pid_ < 0) {
    reply.why = exit_reason_.empty() ? "not running" : exit_reason_;
    return reply;
  }
  const std::string msg = line + "\n";
  for (size_t done = 0; done < msg.size();) {
    const ssize_t n = ::write(in_, msg.data() + done, msg.size() - done);  // SIGPIPE ignored
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      reply.why = fmt::format("cannot write to the worker: {}; {}", std::strerror(errno),
                              reap_reason(true));
      return reply;
    }
    done += static_cast<size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true;
  for (;;) {
    if (const size_t nl = buffered_.find('\n'); nl != std::string::npos) {
      reply.kind = Reply::kLine;
      reply.line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      drain_stderr();
      return reply;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      drain_stderr();
      reply.kind = Reply::kTimeout;
      return reply;
    }
    pollfd fds[2] = {{out_open ? out_ : -1, POLLIN, 0}, {errfd_, POLLIN, 0}};
    const int pr = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0 && errno != EINTR) throw std::runtime_error(fmt::format("poll: {}", std::strerror(errno)));
    if (fds[1].revents) drain_stderr();
    if (out_open && fds[0].revents) {
      char buf[4096];
      const ssize_t n = ::read(out_, buf, sizeof(buf));
      if (n > 0) {
        buffered_.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        out_open = false;  // the worker closed stdout: it is gone (or going)
      }
    }
    if (!out_open) {
      reply.why = reap_reason(true);
      drain_stderr();
      return reply;
    }
  }
}

void WorkerProcess::kill() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    reap_reason(true);
  }
  drain_stderr();
  close_fd(in_);
  close_fd(out_);
  close_fd(errfd_);
}

}  // namespace attnjit::tune
